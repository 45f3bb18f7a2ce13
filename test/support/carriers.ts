// Both carriers at once: the Telnyx and Twilio simulators started side by side,
// and a Handset platform pointed at both (their URLs, keys and tokens), with
// webhooks from each going to its own ingest path. What the carrier tests share.

import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/sim/simulator.js';
import {
  startTwilioSimulator,
  type TwilioSimulator,
  type TwilioSimulatorOptions,
} from '../../src/sim/twilio/simulator.js';
import { startTestPlatform, type TestPlatformOptions } from './platform.js';

export interface TwoCarriers {
  telnyx: Simulator;
  twilio: TwilioSimulator;
  platform: Platform;
  /** The settings that point Handset at both simulators. */
  env: Record<string, string>;
  /** Telnyx accepted a send (not a replay) made with this Idempotency-Key (our message id). */
  telnyxAccepted(messageId: string): number;
  close(): Promise<void>;
}

export async function startTwoCarriers(o: {
  databaseUrl: string;
  roles?: TestPlatformOptions['roles'];
  env?: Record<string, string>;
  telnyx?: SimulatorOptions;
  twilio?: TwilioSimulatorOptions;
}): Promise<TwoCarriers> {
  const telnyx = await startSimulator({ webhookUrl: null, timeScale: 0.05, ...o.telnyx });
  const twilio = await startTwilioSimulator({ timeScale: 0.05, ...o.twilio });
  const env: Record<string, string> = {
    ...telnyx.carrierEnv(),
    ...twilio.carrierEnv(),
    HANDSET_RECONCILE_INTERVAL: '1h',
    ...o.env,
  };
  const platform = await startTestPlatform({
    databaseUrl: o.databaseUrl,
    roles: o.roles ?? ['ingest', 'api', 'worker'],
    env,
  });
  if (platform.ingestUrl) {
    telnyx.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
    if (!o.twilio || o.twilio.smsUrl === undefined) twilio.setWebhookUrl(`${platform.ingestUrl}/webhooks/twilio`);
  }
  return {
    telnyx,
    twilio,
    platform,
    env,
    telnyxAccepted: (id) =>
      telnyx.requests.filter(
        (r) =>
          r.method === 'POST' &&
          r.path === '/v2/messages' &&
          r.idempotencyKey === id &&
          r.status === 200 &&
          !r.replayed,
      ).length,
    async close() {
      await platform.stop();
      await telnyx.close();
      await twilio.close();
    },
  };
}
