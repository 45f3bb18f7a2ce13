// Rate limiting per API key, and logs that never carry secrets: what an operator
// can safely ship to a log service.

import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, telnyxWebhook, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let receiver: Receiver;
let logs = '';
const capture = new Writable({
  write(chunk, _enc, done) {
    logs += chunk.toString();
    done();
  },
});

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'logs' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: { ...sim.carrierEnv(), HANDSET_API_RATE_LIMIT: '20' },
    log: createLogger('info', capture),
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  receiver = await startReceiver();
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await receiver.close();
  await db.drop();
});

describe('rate limiting', () => {
  it('an API key over its limit gets 429 problem+json with Retry-After; another key is unaffected', async () => {
    const busy: ApiClient = await createAccount(db.pool, platform.apiUrl!, 'Busy');
    const calm: ApiClient = await createAccount(db.pool, platform.apiUrl!, 'Calm');
    // The limit counts per second of the clock: the burst starts as a second begins, and may
    // have 20 answered in each second it reached the server in (the last one, on a busy machine).
    await new Promise((r) => setTimeout(r, 1005 - (Date.now() % 1000)));
    const started = Date.now();
    const results = await Promise.all(Array.from({ length: 60 }, () => busy.get('/v1/phone_numbers')));
    const seconds = Math.floor(Date.now() / 1000) - Math.floor(started / 1000) + 1;
    const limited = results.filter((r) => r.status === 429);
    expect(results.filter((r) => r.status === 200).length).toBeLessThanOrEqual(20 * seconds);
    expect(limited.length).toBeGreaterThanOrEqual(Math.max(1, results.length - 20 * seconds));
    expect(limited[0]!.json).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(limited[0]!.headers.get('content-type')).toMatch(/problem\+json/);
    expect(Number(limited[0]!.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await calm.get('/v1/phone_numbers')).status).toBe(200);
  });
});

describe('logs', () => {
  it('a full scenario at info level logs no API key, webhook secret, carrier key or carrier payload', async () => {
    const acme = await createAccount(db.pool, platform.apiUrl!, 'Logged');
    const ep = await acme.post('/v1/webhook_endpoints', { url: receiver.url });
    const rotated = await acme.post(`/v1/webhook_endpoints/${ep.json.id}/rotate_secret`);
    await acme.post('/v1/phone_numbers', { number: '+13125550400' });
    const secretText = `the launch code is ${randomUUID()}`;
    const sent = await acme.post('/v1/messages', { from: '+13125550400', to: '+15555550100', body: secretText });
    await acme.post('/v1/messages', { from: '+13125550400', to: '+15555550103', body: secretText }); // rejected by the carrier: logged
    const inboundText = `inbound secret ${randomUUID()}`;
    await sim.deliver(
      telnyxWebhook.messageReceived({
        messageId: randomUUID(),
        from: '+14155550123',
        to: '+13125550400',
        text: inboundText,
      }),
    );
    await sim.deliver(
      telnyxWebhook.messageReceived({
        messageId: randomUUID(),
        from: '+14155550123',
        to: '+19995550000',
        text: inboundText,
      }),
    ); // rejected: logged
    await fetch(`${platform.apiUrl}/v1/messages`, { headers: { authorization: `Bearer ${acme.key}x` } }); // a bad key
    await eventually(async () => (await acme.get(`/v1/messages/${sent.json.id}`)).json.status === 'delivered', 20_000);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );

    expect(logs.length).toBeGreaterThan(0);
    for (const secret of [
      acme.key,
      acme.key.slice(14),
      ep.json.secret,
      rotated.json.secret,
      sim.apiKey,
      secretText,
      inboundText,
    ]) {
      expect(logs).not.toContain(secret);
    }
    expect(logs).not.toMatch(/whsec_|hsk_[A-Za-z0-9_-]{20}/);
    expect(logs).not.toContain('"payload"');
  });
});
