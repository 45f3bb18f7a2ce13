// `npm run bench:calls`: how fast the worker turns call hangups into the next
// ring, with duplicates. N sequential-ring calls each have their first leg time
// out; every hangup is delivered twice (50% of the webhooks are duplicates, same
// event id), signed, through ingest. Measured: from the first webhook to every
// call having claimed and dialed its next target exactly once; then checked:
// each call has exactly two legs and the carrier saw exactly 2N dials.
// Flags: --calls N (default 400), --concurrency C (default 16); --help.

import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { accountCreate, apiKeyCreate } from '../../accounts/accounts.js';
import { encodeClientState } from '../../carrier/telnyx/events.js';
import { loadConfig } from '../../config.js';
import { startEmbeddedPostgres } from '../../db/embedded.js';
import { migrate } from '../../db/migrate.js';
import { createPool } from '../../db/pool.js';
import { withTx } from '../../db/tx.js';
import { startPlatform } from '../../platform.js';
import { numberOption, parseTool, toolCommand } from '../command.js';
import { startSimulator, telnyxWebhook } from '../../sim/simulator.js';
import { createLogger } from '../../telemetry/log.js';

const cmd = toolCommand('bench:calls', 'How fast the worker turns call hangups into the next ring, with duplicates.')
  .addOption(numberOption('--calls <n>', 'sequential-ring calls', 1).default(400))
  .addOption(numberOption('--concurrency <n>', 'webhooks in flight', 1).default(16));
const { calls: N, concurrency: C } = parseTool<{ calls: number; concurrency: number }>(cmd, process.argv.slice(2));
const MANUAL = '+15555550115'; // the simulator's "manual" persona: nothing happens unless we say so
const log = createLogger('silent');

const dir = await mkdtemp(path.join(os.tmpdir(), 'handset-bench-calls-'));
const pg = process.env.DATABASE_URL ? null : await startEmbeddedPostgres({ stateDir: dir, log });
const databaseUrl = process.env.DATABASE_URL ?? pg!.url;
const pool = createPool(databaseUrl, { max: 4, applicationName: 'bench-calls' });
await migrate(pool, log);
for (const t of ['call_legs', 'calls', 'carrier_events']) await pool.query(`TRUNCATE ${t} CASCADE`);
const sim = await startSimulator({ webhookUrl: null, seed: 'bench-calls' });
const config = loadConfig(
  {
    HANDSET_HOST: '127.0.0.1',
    HANDSET_API_PORT: '0',
    HANDSET_INGEST_PORT: '0',
    ...sim.carrierEnv(),
    HANDSET_API_RATE_LIMIT: '100000',
    HANDSET_ADDRESS_RATE_LIMIT: '100000',
    LOG_LEVEL: 'silent',
  },
  'serve',
);
const platform = await startPlatform({ config, databaseUrl, roles: ['ingest', 'api', 'worker'], log });
const ingest = `${platform.ingestUrl}/webhooks/telnyx`;

try {
  const key = await withTx(pool, async (tx) => {
    const account = await accountCreate(tx, 'bench-calls');
    await tx.query(
      `INSERT INTO phone_numbers (account_id, number) VALUES ($1, '+13125550199') ON CONFLICT DO NOTHING`,
      [account.id],
    );
    return (await apiKeyCreate(tx, account.id)).key;
  });
  const post = (body: unknown) =>
    fetch(`${platform.apiUrl}/v1/calls`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  await inParallel(N, C, async () => {
    const res = await post({ from: '+13125550199', to: [MANUAL, MANUAL], ring_timeout_secs: 20 });
    if (res.status !== 201) throw new Error(`POST /v1/calls: ${res.status}`);
  });
  await until(
    async () => (await count(`SELECT count(*) FROM call_legs WHERE position = 0 AND carrier_ref IS NOT NULL`)) === N,
  );
  const { rows: legs } = await pool.query(`SELECT id, call_id, carrier_ref FROM call_legs WHERE position = 0`);
  const webhooks = legs.flatMap((l) => {
    const body = telnyxWebhook.callHangup({
      callControlId: l.carrier_ref,
      from: '+13125550199',
      to: MANUAL,
      clientState: encodeClientState({ c: l.call_id, l: l.id, p: 0 }),
      hangupCause: 'timeout',
    });
    return [body, body]; // the same event twice: 50% duplicates
  });
  shuffle(webhooks);

  const started = performance.now();
  await inParallel(webhooks.length, C, async (i) => {
    const status = await sim.deliver(webhooks[i]!, ingest);
    if (status !== 200) throw new Error(`ingest answered ${status}`);
  });
  const ingested = performance.now();
  await until(
    async () => (await count(`SELECT count(*) FROM call_legs WHERE position = 1 AND carrier_ref IS NOT NULL`)) === N,
  );
  await until(
    async () =>
      (await count(`SELECT count(*) FROM carrier_events WHERE processed_at IS NULL AND event_type = 'call.hangup'`)) ===
      0,
  );
  const done = performance.now();

  const legsPerCall = await count(
    `SELECT count(*) FROM (SELECT call_id FROM call_legs GROUP BY call_id HAVING count(*) <> 2) x`,
  );
  const dials = sim.requests.filter((r) => r.path === '/v2/calls' && r.status === 200 && !r.deduplicated).length;
  const seconds = (done - started) / 1000;
  const report = {
    calls: N,
    hangupWebhooks: webhooks.length,
    duplicates: webhooks.length - N,
    secondsToIngest: +((ingested - started) / 1000).toFixed(2),
    secondsToAllNextDials: +seconds.toFixed(2),
    hangupsPerSecond: Math.round(webhooks.length / seconds),
    distinctHangupsPerSecond: Math.round(N / seconds),
    callsWithOtherThanTwoLegs: legsPerCall,
    carrierDials: dials,
    expectedDials: 2 * N,
    machine: `${os.cpus().length} cores, Node ${process.version}`,
  };
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  process.exitCode = legsPerCall === 0 && dials === 2 * N ? 0 : 1;
} finally {
  await platform.stop();
  await sim.close();
  await pool.end();
  if (pg) await pg.stop();
  await rm(dir, { recursive: true, force: true });
}

async function count(sql: string): Promise<number> {
  return Number((await pool.query<{ count: string }>(sql)).rows[0]!.count);
}

async function until(check: () => Promise<boolean>, timeoutMs = 300_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function inParallel(n: number, c: number, fn: (i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < n) await fn(next++);
    }),
  );
}

function shuffle<T>(a: T[]) {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
}
