// The customer's side of exactly-once, end to end: Handset (its roles in this
// process, the simulator as a carrier that repeats itself) delivers a storm of
// message events to the example receiver (examples/inbox-receiver, @handset/inbox
// on its own PostgreSQL) running as a process of its own. On the way the
// receiver is SIGKILLed and restarted at random, the connection in front of it is
// cut at random (answers lost after the commit), it is down long enough for some
// deliveries to fail for good, and then every kind of re-send comes: the
// retries, a redelivery of events already handled, and a recover of what failed.
// At the end the receiver's business tables must be each event applied once:
// one billed segment count per message.sent, one handled event per event id, each
// message's status that of its highest sequence.

import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { accountCreate, apiKeyCreate } from '../../accounts/accounts.js';
import { loadConfig } from '../../config.js';
import { createDatabase, dropDatabase } from '../../db/databases.js';
import { freePort } from '../../db/embedded.js';
import { migrate } from '../../db/migrate.js';
import { createPool } from '../../db/pool.js';
import { withTx } from '../../db/tx.js';
import { newSecretKey } from '../../delivery/keyring.js';
import { startPlatform } from '../../platform.js';
import { startSimulator } from '../../sim/simulator.js';
import type { Logger } from '../../telemetry/log.js';
import { runServer } from './server.js';
import { startTcpProxy } from './tcp-proxy.js';

const RECEIVER = fileURLToPath(new URL('../../../examples/inbox-receiver/server.js', import.meta.url));

export interface InboxChaosOptions {
  /** Outbound messages sent through the API during the storm (each: message.sent, then delivered or failed). */
  messages: number;
  /** Inbound SMS the carrier brings in (each: message.received). */
  inbound: number;
  /** Messages sent while the receiver is down past every retry (their deliveries fail; recover re-sends them). */
  duringOutage: number;
  /** Events redelivered after the storm (already handled: each must answer duplicate). */
  redeliveries: number;
  /** The receiver is SIGKILLed every killEveryMs[0]..[1] ms during the storm (0 = never). */
  killEveryMs: [number, number];
  /** The connection in front of the receiver is cut every cutEveryMs[0]..[1] ms (0 = never). */
  cutEveryMs: [number, number];
  loadMs: number;
  databaseUrl: string | null;
  seed: string;
  log: Logger;
  out: (line: string) => void;
}

export const INBOX_CHAOS_DEFAULTS: Omit<InboxChaosOptions, 'log' | 'out' | 'databaseUrl'> = {
  messages: 120,
  inbound: 30,
  duringOutage: 8,
  redeliveries: 40,
  killEveryMs: [700, 2500],
  cutEveryMs: [400, 1500],
  loadMs: 20_000,
  seed: 'inbox-chaos',
};

export interface InboxChaosResult {
  events: number;
  attempts: number;
  /** Requests the receiver answered, by outcome (from its own log). */
  answered: Record<string, number>;
  receiverKills: number;
  cuts: number;
  redelivered: number;
  recovered: number;
  /** Rows the receiver's handler left: one per event id handled. */
  effects: number;
  mismatches: string[];
  seconds: number;
}

const OUR_NUMBER = '+13125550190';
const RECIPIENTS = ['+15555550100', '+15555550101', '+15555550104'];

export async function runInboxChaos(opts: InboxChaosOptions): Promise<InboxChaosResult> {
  const started = Date.now();
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    const adminUrl = await runServer(opts.databaseUrl, {
      prefix: 'handset-inbox-chaos',
      maxConnections: 200,
      log: opts.log,
      cleanups,
    });
    const suffix = randomBytes(4).toString('hex');
    const handsetDb = await createDatabase(adminUrl, `handset_inboxchaos_${suffix}`);
    cleanups.push(() => dropDatabase(adminUrl, `handset_inboxchaos_${suffix}`));
    const customerDb = await createDatabase(adminUrl, `handset_inboxchaos_customer_${suffix}`);
    cleanups.push(() => dropDatabase(adminUrl, `handset_inboxchaos_customer_${suffix}`));
    const pool = createPool(handsetDb, { max: 4, applicationName: 'handset-inbox-chaos', log: opts.log });
    cleanups.push(() => pool.end());
    await migrate(pool, opts.log);
    const customer = new pg.Pool({ connectionString: customerDb, max: 2 });
    customer.on('error', () => {});
    cleanups.push(() => customer.end());

    const sim = await startSimulator({
      webhookUrl: null,
      timeScale: 0.05,
      seed: opts.seed,
      behaviour: { duplicateRate: 0.5, resendNewIdRate: 0.3, contradictionRate: 0.3 },
      log: opts.log,
    });
    cleanups.push(() => sim.close());
    const config = loadConfig(
      {
        HANDSET_HOST: '127.0.0.1',
        HANDSET_API_PORT: '0',
        HANDSET_INGEST_PORT: '0',
        ...sim.carrierEnv(),
        HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'true',
        HANDSET_SECRET_KEY: newSecretKey(),
        HANDSET_WORKER_STALE_AFTER: '3s',
        HANDSET_DELIVERY_RETRY_SCHEDULE: '200ms,500ms,1s,2s,3s',
        HANDSET_DELIVERY_TIMEOUT: '5s',
        HANDSET_ENDPOINT_DISABLE_AFTER: '10000',
        HANDSET_RECONCILE_MESSAGE_AFTER: '3s',
        LOG_LEVEL: 'warn',
      },
      'serve',
    );
    const platform = await startPlatform({
      config,
      databaseUrl: handsetDb,
      roles: ['ingest', 'api', 'worker'],
      log: opts.log,
    });
    cleanups.push(() => platform.stop());
    sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);

    const apiKey = await withTx(
      pool,
      async (tx) => (await apiKeyCreate(tx, (await accountCreate(tx, 'Inbox')).id)).key,
    );
    // A careful client: what the API could not answer (busy, 503 while the database is slow) is
    // asked again with the same Idempotency-Key.
    const api = async (method: string, route: string, body?: unknown) => {
      const key = randomBytes(12).toString('hex');
      for (let attempt = 0; ; attempt++) {
        const res = await fetch(platform.apiUrl + route, {
          method,
          headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        }).catch((err: Error) => err);
        if (res instanceof Error || [409, 429, 503].includes(res.status)) {
          if (attempt > 200) throw res instanceof Error ? res : new Error(`${method} ${route}: ${res.status}`);
          await sleep(250);
          continue;
        }
        const json = (await res.json().catch(() => null)) as Record<string, unknown> | null;
        if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${JSON.stringify(json)}`);
        return json!;
      }
    };
    await api('POST', '/v1/phone_numbers', { number: OUR_NUMBER });

    // The receiver, as its own process on a port of its own, behind a proxy the run can cut.
    const port = await freePort();
    const proxy = await startTcpProxy('127.0.0.1', port);
    cleanups.push(() => proxy.close());
    const endpoint = await api('POST', '/v1/webhook_endpoints', { url: `http://127.0.0.1:${proxy.port}/webhooks` });
    const endpointId = String(endpoint['id']);
    const answered: Record<string, number> = {};
    let receiver: ChildProcess | null = null;
    const alive = () => receiver !== null && receiver.exitCode === null && receiver.signalCode === null;
    const startReceiver = async () => {
      const child = spawn(process.execPath, [RECEIVER], {
        env: {
          PATH: process.env['PATH'],
          HOME: process.env['HOME'],
          DATABASE_URL: customerDb,
          HANDSET_WEBHOOK_SECRET: String(endpoint['secret']),
          PORT: String(port),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      receiver = child;
      let buffered = '';
      const up = new Promise<void>((resolve, reject) => {
        const onLine = (chunk: Buffer) => {
          buffered += chunk.toString('utf8');
          const lines = buffered.split('\n');
          buffered = lines.pop()!;
          for (const line of lines) {
            const m = /^\S+\s+(\d{3}) (\w+)/.exec(line);
            if (m) answered[`${m[1]} ${m[2]}`] = (answered[`${m[1]} ${m[2]}`] ?? 0) + 1;
            if (line.startsWith('inbox-receiver listening')) resolve();
          }
        };
        child.stdout!.on('data', onLine);
        child.stderr!.on('data', (c: Buffer) => opts.log.debug({ receiver: c.toString() }, 'receiver stderr'));
        child.once('exit', (code, signal) =>
          reject(new Error(`the receiver exited (${code ?? signal}) before listening`)),
        );
      });
      await up;
    };
    const kill = async () => {
      const child = receiver;
      if (!child || !alive()) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    };
    cleanups.push(kill);
    await startReceiver();

    // The storm, with the receiver killed and its connection cut at random.
    opts.out(
      `inbox storm: ${opts.messages} SMS out, ${opts.inbound} in, the receiver SIGKILLed every ${opts.killEveryMs.join('–')} ms`,
    );
    let storming = true;
    let kills = 0;
    let cuts = 0;
    let killerFailed: unknown = null;
    const killer = (async () => {
      while (storming && opts.killEveryMs[1] > 0) {
        await sleep(between(opts.killEveryMs));
        if (!storming) break;
        await kill();
        kills++;
        await startReceiver();
      }
    })().catch((err) => {
      killerFailed = err;
    });
    cleanups.push(async () => {
      storming = false;
      await killer;
    });
    const cutter = (async () => {
      while (storming && opts.cutEveryMs[1] > 0) {
        await sleep(between(opts.cutEveryMs));
        if (!storming) break;
        proxy.cut();
        cuts++;
        await sleep(50 + Math.random() * 200);
        proxy.restore();
      }
    })();
    const work: (() => Promise<unknown>)[] = [];
    for (let i = 0; i < opts.messages; i++) {
      const to = RECIPIENTS[i % RECIPIENTS.length]!;
      // Some long enough for two segments.
      const body = i % 5 === 0 ? `inbox storm ${i} ${'x'.repeat(170)}` : `inbox storm ${i}`;
      work.push(() => api('POST', '/v1/messages', { from: OUR_NUMBER, to, body }));
    }
    for (let i = 0; i < opts.inbound; i++) {
      work.push(async () =>
        sim.injectInboundSms({ from: `+1415800${String(i).padStart(4, '0')}`, to: OUR_NUMBER, text: `hi ${i}` }),
      );
    }
    const gap = opts.loadMs / Math.max(1, work.length);
    await Promise.all(work.map(async (w, i) => sleep(i * gap).then(w)));
    await settled(pool, sim);
    storming = false;
    await Promise.all([killer, cutter]);
    if (killerFailed) throw killerFailed;
    proxy.restore();
    if (!alive()) await startReceiver();
    await settled(pool, sim);
    opts.out(`storm settled after ${Math.round((Date.now() - started) / 1000)} s (${kills} kills, ${cuts} cuts)`);

    // Down past every retry: these deliveries fail for good, until recover.
    await kill();
    for (let i = 0; i < opts.duringOutage; i++) {
      await api('POST', '/v1/messages', { from: OUR_NUMBER, to: RECIPIENTS[0]!, body: `during the outage ${i}` });
    }
    await settled(pool, sim);
    const failed = await count(pool, `SELECT 1 FROM webhook_deliveries WHERE status = 'failed'`);
    await startReceiver();
    // Since the start: also whatever the storm's kills and cuts made fail past its last retry.
    await api('POST', `/v1/webhook_endpoints/${endpointId}/recover`, {
      since: new Date(started - 60_000).toISOString(),
    });
    await until(async () => (await count(pool, `SELECT 1 FROM webhook_recoveries WHERE status = 'running'`)) === 0);
    await settled(pool, sim);
    opts.out(`recovered ${failed} deliveries that had failed for good (most while the receiver was down)`);

    // Redeliveries of events already handled.
    const { rows: sample } = await pool.query<{ id: string }>(
      'SELECT event_id AS id FROM webhook_deliveries ORDER BY random() LIMIT $1',
      [opts.redeliveries],
    );
    for (const { id } of sample) await api('POST', `/v1/events/${id}/redeliver`);
    await until(
      async () =>
        (await count(
          pool,
          `SELECT 1 FROM webhook_attempts WHERE trigger = 'redeliver' AND (response_status IS NOT NULL OR error IS NOT NULL)`,
        )) >= sample.length,
    );
    await settled(pool, sim);

    const mismatches = await compare(pool, customer);
    return {
      events: await count(pool, 'SELECT DISTINCT event_id FROM webhook_deliveries'),
      attempts: await count(pool, 'SELECT 1 FROM webhook_attempts'),
      answered,
      receiverKills: kills,
      cuts,
      redelivered: sample.length,
      recovered: failed,
      effects: Number((await customer.query('SELECT coalesce(sum(events), 0)::int AS n FROM balances')).rows[0].n),
      mismatches,
      seconds: Math.round((Date.now() - started) / 1000),
    };
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  }
}

/** What the receiver's tables must say: every event applied once, each message at its highest sequence. */
async function compare(handset: pg.Pool, customer: pg.Pool): Promise<string[]> {
  const out: string[] = [];
  const { rows: undelivered } = await handset.query<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM webhook_deliveries WHERE status <> 'succeeded' GROUP BY status`,
  );
  for (const u of undelivered) out.push(`${u.n} deliveries ended ${u.status}`);
  // The events the receiver's endpoint was sent (operational ones about it, such as an exhausted
  // delivery, go only to an account's other endpoints: it has none).
  const { rows: events } = await handset.query<{
    id: string;
    account_id: string;
    type: string;
    data: Record<string, unknown>;
  }>('SELECT e.id, e.account_id, e.type, e.data FROM outbound_events e JOIN webhook_deliveries d ON d.event_id = e.id');
  const remembered = new Set(
    (await customer.query<{ event_id: string }>('SELECT event_id FROM handset_inbox')).rows.map((r) => r.event_id),
  );
  const missing = events.filter((e) => !remembered.has(e.id));
  if (missing.length > 0)
    out.push(`${missing.length} events never handled, e.g. ${missing[0]!.id} ${missing[0]!.type}`);
  if (remembered.size !== events.length)
    out.push(`the inbox remembers ${remembered.size} ids for ${events.length} events`);

  const want = new Map<string, { segments: number; events: number }>();
  const messages = new Map<string, { events: number; sequence: number; status: string }>();
  for (const e of events) {
    const w = want.get(e.account_id) ?? { segments: 0, events: 0 };
    w.events++;
    if (e.type === 'message.sent') w.segments += Number(e.data['segments'] ?? 1);
    want.set(e.account_id, w);
    if (e.type.startsWith('message.')) {
      const id = String(e.data['id']);
      const m = messages.get(id) ?? { events: 0, sequence: -1, status: '' };
      m.events++;
      if (Number(e.data['sequence']) > m.sequence) {
        m.sequence = Number(e.data['sequence']);
        m.status = String(e.data['status']);
      }
      messages.set(id, m);
    }
  }
  const { rows: balances } = await customer.query<{ account_id: string; sms_segments: string; events: string }>(
    'SELECT account_id, sms_segments, events FROM balances',
  );
  for (const [account, w] of want) {
    const got = balances.find((b) => b.account_id === account);
    const g = { segments: Number(got?.sms_segments ?? 0), events: Number(got?.events ?? 0) };
    if (g.segments !== w.segments || g.events !== w.events) {
      out.push(`balance of ${account}: expected ${JSON.stringify(w)}, got ${JSON.stringify(g)}`);
    }
  }
  const { rows: seen } = await customer.query<{ message_id: string; status: string; sequence: string; events: number }>(
    'SELECT message_id, status, sequence, events FROM messages_seen',
  );
  const seenById = new Map(seen.map((s) => [s.message_id, s]));
  for (const [id, m] of messages) {
    const s = seenById.get(id);
    const got = s ? { events: s.events, sequence: Number(s.sequence), status: s.status } : null;
    if (!got || got.events !== m.events || got.sequence !== m.sequence || got.status !== m.status) {
      out.push(`${id}: expected ${JSON.stringify(m)}, got ${JSON.stringify(got)}`);
    }
  }
  if (seen.length !== messages.size) out.push(`messages_seen has ${seen.length} rows for ${messages.size} messages`);
  return out;
}

/** The carrier has nothing pending and Handset has delivered (or given up on) everything. */
async function settled(pool: pg.Pool, sim: { idle(): Promise<void> }): Promise<void> {
  let calm = 0;
  const deadline = Date.now() + 300_000;
  while (calm < 2) {
    if (Date.now() > deadline) throw new Error('the inbox storm did not settle within 5 minutes');
    await sim.idle();
    const busy = await count(
      pool,
      `SELECT 1 FROM webhook_deliveries WHERE status = 'pending'
       UNION ALL SELECT 1 FROM messages WHERE status IN ('queued', 'scheduled')
       UNION ALL SELECT 1 FROM carrier_events ce WHERE processed_at IS NULL AND error IS NULL`,
    );
    calm = busy === 0 ? calm + 1 : 0;
    await sleep(500);
  }
}

async function until(check: () => Promise<boolean>, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('the inbox storm waited too long');
    await sleep(250);
  }
}

async function count(pool: pg.Pool, sql: string): Promise<number> {
  return Number((await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${sql}) q`)).rows[0]!.n);
}

export function inboxChaosTable(r: InboxChaosResult): string {
  const rows: [string, string | number][] = [
    ['customer events', r.events],
    ['delivery attempts', r.attempts],
    [
      'receiver answers',
      Object.entries(r.answered)
        .map(([k, v]) => `${k} ${v}`)
        .join(', '),
    ],
    ['receiver processes SIGKILLed', r.receiverKills],
    ['connections cut in front of it', r.cuts],
    ['events redelivered / deliveries recovered', `${r.redelivered} / ${r.recovered}`],
    ['handler effects (balances.events)', r.effects],
    ['differences from each event applied once', r.mismatches.length],
    ['seconds', r.seconds],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n');
}

const between = ([min, max]: [number, number]) => min + Math.random() * (max - min);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `npm run chaos`'s inbox part: runs it at the default size, prints its table; 0 when every event was applied once. */
export async function inboxChaosPhase(seed: string, log: Logger, out: (line: string) => void): Promise<number> {
  const result = await runInboxChaos({
    ...INBOX_CHAOS_DEFAULTS,
    seed: `${seed}-inbox`,
    databaseUrl: process.env['DATABASE_URL'] ?? null,
    log,
    out,
  });
  out(`\n${inboxChaosTable(result)}`);
  for (const m of result.mismatches.slice(0, 20)) out(`  ${m}`);
  return result.mismatches.length === 0 ? 0 : 1;
}
