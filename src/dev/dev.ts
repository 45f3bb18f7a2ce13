// `handset dev` (what `npm start` runs): the whole platform on one machine with
// nothing but Node.js — an embedded PostgreSQL under .handset/, migrations, the
// ingest, API and worker roles, and two carriers: the Telnyx simulator (messages
// and calls) and the Twilio simulator (messages), wired together (their URLs,
// keys, signing keys and connection id). A demo account, API key and a phone
// number at each carrier are created on first run and kept across restarts;
// `--reset` starts from scratch.

import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { accountCreate, apiKeyCreate } from '../accounts/accounts.js';
import { accountExists } from '../accounts/accounts.sql.js';
import { ROLES, type Config } from '../config.js';
import { startEmbeddedPostgres } from '../db/embedded.js';
import { createPool } from '../db/pool.js';
import { withTx } from '../db/tx.js';
import { numberInsert } from '../numbers/numbers.sql.js';
import { startPlatform } from '../platform.js';
import { loadOrCreateKey } from '../sim/cli.js';
import { startSimulator } from '../sim/simulator.js';
import { startTwilioSimulator } from '../sim/twilio/simulator.js';
import type { Logger } from '../telemetry/log.js';
import { DEMO_NUMBER, DEMO_RING, DEMO_TWILIO_NUMBER } from './demo.js';
import { readDevState, writeDevState, type DevState } from './state.js';

export interface DevHandle {
  state: DevState;
  stop(): Promise<void>;
}

export async function startDev(
  config: Config,
  log: Logger,
  opts: { reset?: boolean; say?: (line: string) => void } = {},
): Promise<DevHandle> {
  if (opts.reset) await rm(config.stateDir, { recursive: true, force: true });
  const stops: (() => Promise<void>)[] = [];
  const stop = async () => {
    for (const s of stops.reverse())
      await s().catch((err: Error) => log.error({ err: err.message }, 'dev shutdown step failed'));
  };
  try {
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      const pg = await startEmbeddedPostgres({ stateDir: config.stateDir, log });
      if (pg.moved) opts.say?.(`${pg.moved}: its data is in ${pg.dataDir} (the rest stays in ${config.stateDir}).`);
      databaseUrl = pg.url;
      stops.push(pg.stop);
    }
    const sim = await startSimulator({
      port: config.simPort,
      host: config.host,
      webhookUrl: null,
      privateKey: await loadOrCreateKey(path.join(config.stateDir, 'sim-key.pem')),
      log,
    });
    stops.push(() => sim.close());
    const twilio = await startTwilioSimulator({
      host: config.host,
      seed: sim.seed,
      authToken: await loadOrCreateToken(path.join(config.stateDir, 'twilio-token')),
      log,
    });
    stops.push(() => twilio.close());
    const devConfig: Config = {
      ...config,
      secretKeys: config.secretKeys ?? [await loadOrCreateSecretKey(path.join(config.stateDir, 'secret.key'))],
      telnyx: {
        ...config.telnyx,
        apiUrl: sim.url,
        apiKey: sim.apiKey,
        publicKey: sim.publicKeyBase64,
        connectionId: sim.connectionId,
        messagingProfileId: sim.messagingProfileId,
      },
      twilio: config.twilio ?? { accountSid: twilio.accountSid, authToken: twilio.authToken, apiUrl: twilio.url },
    };
    const platform = await startPlatform({ config: devConfig, databaseUrl, roles: ROLES, log });
    stops.push(() => platform.stop());
    sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
    twilio.setWebhookUrl(`${platform.ingestUrl}/webhooks/twilio`);

    const demo = await ensureDemo(databaseUrl, config.stateDir, log);
    const state: DevState = {
      apiUrl: platform.apiUrl!,
      ingestUrl: platform.ingestUrl!,
      simUrl: sim.url,
      simControlUrl: sim.controlUrl,
      twilioSimControlUrl: twilio.controlUrl,
      twilioNumber: DEMO_TWILIO_NUMBER,
      twilioCarrier: twilio.carrierEnv(),
      databaseUrl,
      ...demo,
      carrier: sim.carrierEnv(),
      pid: process.pid,
    };
    await writeDevState(config.stateDir, state);
    return { state, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Dev mode's HANDSET_SECRET_KEY when none is set: made once, kept in the state directory (mode 600). */
async function loadOrCreateSecretKey(file: string): Promise<Buffer> {
  if (existsSync(file)) return Buffer.from((await readFile(file, 'utf8')).trim(), 'base64');
  const key = randomBytes(32);
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, `${key.toString('base64')}\n`, { mode: 0o600 });
  return key;
}

/** The Twilio simulator's auth token in dev: made once, kept in the state directory (mode 600). */
async function loadOrCreateToken(file: string): Promise<string> {
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim();
  const token = randomBytes(16).toString('hex');
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, `${token}\n`, { mode: 0o600 });
  return token;
}

/** The demo account, key and numbers: made once, then found again on every start. */
async function ensureDemo(databaseUrl: string, stateDir: string, log: Logger) {
  const previous = await readDevState(stateDir);
  const pool = createPool(databaseUrl, { max: 2, applicationName: 'handset-dev', log });
  // Its number at Twilio too (a dev made before Twilio came along gets it on its next start).
  const atTwilio = (accountId: string) =>
    withTx(pool, (tx) =>
      numberInsert(tx, {
        accountId,
        tenantId: null,
        carrier: 'twilio',
        number: DEMO_TWILIO_NUMBER,
        inboundRing: [],
        ringTimeoutSecs: 20,
      }),
    );
  try {
    if (previous) {
      if (await accountExists(pool, previous.accountId)) {
        await atTwilio(previous.accountId);
        return { accountId: previous.accountId, apiKey: previous.apiKey, number: previous.number };
      }
    }
    const made = await withTx(pool, async (tx) => {
      const account = await accountCreate(tx, 'Demo');
      const { key } = await apiKeyCreate(tx, account.id);
      await numberInsert(tx, {
        accountId: account.id,
        tenantId: null,
        carrier: 'telnyx',
        number: DEMO_NUMBER,
        inboundRing: DEMO_RING,
        ringTimeoutSecs: 5,
      });
      return { accountId: account.id, apiKey: key, number: DEMO_NUMBER };
    });
    await atTwilio(made.accountId);
    return made;
  } finally {
    await pool.end();
  }
}

export function devBanner(s: DevState, logFile: string): string {
  const auth = `-H "Authorization: Bearer ${s.apiKey}"`;
  const json = `-H "Content-Type: application/json"`;
  return [
    '',
    'Handset is running, with the Telnyx and Twilio simulators as its carriers.',
    '',
    `  API        ${s.apiUrl}          docs: ${s.apiUrl}/docs`,
    `  API key    ${s.apiKey}`,
    // The key stays out of the console's URL (it would land in browser history): the console asks for it.
    `  Console    ${s.apiUrl}/console  (sign in with the API key above)`,
    `  Number     ${s.number}  (Telnyx; inbound calls ring ${DEMO_RING.join(', ')})`,
    `             ${s.twilioNumber ?? DEMO_TWILIO_NUMBER}  (Twilio: messages only; calls stay on Telnyx)`,
    `  Carrier    ${s.simUrl}  (simulator control: ${s.simControlUrl}/state)`,
    `  Logs       ${logFile}`,
    '',
    'Try, in another terminal:',
    '',
    '  # 1. watch your events (verified Standard Webhooks, like `stripe listen`)',
    '  npx handset listen',
    '',
    '  # 2. send an SMS',
    `  curl -s ${s.apiUrl}/v1/messages ${auth} ${json} \\`,
    `    -d '{"from":"${s.number}","to":"+15555550100","body":"Hello from Handset"}'`,
    '',
    '  # 3. place a call that rings three phones in order until one answers',
    `  curl -s ${s.apiUrl}/v1/calls ${auth} ${json} \\`,
    `    -d '{"from":"${s.number}","to":${JSON.stringify(DEMO_RING)},"ring_timeout_secs":5}'`,
    '',
    '  # and see exactly-once under a misbehaving carrier: npx handset trigger duplicate-storm',
    '  # or a message failing over from Telnyx (down) to Twilio, sent once: npx handset trigger failover',
    '',
  ].join('\n');
}
