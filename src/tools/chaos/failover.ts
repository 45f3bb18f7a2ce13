// The failover run: a primary and a streaming standby (the embedded binaries), the
// Handset roles reaching the leader through a TCP proxy, a storm of signed inbound
// SMS, sends with receipts and calls through the simulator; mid-storm the primary
// is SIGKILLed (postmaster and every backend: a host that died), the standby
// promoted and the proxy switched to it. Then it waits for quiescence on the new
// primary and counts: every carrier event answered 200 against the rows there,
// what reconciliation (asking the carrier) or a later event recovered of what is
// missing, what nothing can recover, the audit, the Handset processes that exited,
// and how long each step of the failover took.
//
// Synchronous mode (synchronous_standby_names names the standby; COMMIT waits for
// its flush) must lose nothing. Asynchronous mode on loopback loses nothing either
// unless the standby falls behind, so the run freezes the primary's walsender for
// a moment before the kill: what the primary acknowledged meanwhile is gone.

import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { accountCreate, apiKeyCreate } from '../../accounts/accounts.js';
import { type AuditReport, runAudit } from '../../audit/audit.js';
import { loadConfig } from '../../config.js';
import { createDatabase, onServer, withPort } from '../../db/databases.js';
import { type EmbeddedPostgres, startEmbeddedPostgres, startEmbeddedStandby } from '../../db/embedded.js';
import { migrate } from '../../db/migrate.js';
import { createPool } from '../../db/pool.js';
import { withTx } from '../../db/tx.js';
import { recoveryTimings } from '../../jobs/runner.js';
import { startPlatform } from '../../platform.js';
import { startSimulator } from '../../sim/simulator.js';
import type { Logger } from '../../telemetry/log.js';
import { chaosRoleSettings, HANDSET_BIN, quiescence, startCountingReceiver } from './chaos.js';
import { startTcpProxy } from './tcp-proxy.js';

export type ReplicationMode = 'sync' | 'async';

export interface FailoverOptions {
  mode: ReplicationMode;
  outboundMessages: number;
  inboundMessages: number;
  outboundCalls: number;
  inboundCalls: number;
  workers: number;
  /** How long the storm is spread over; the primary dies at killAt of it. */
  loadMs: number;
  killAt: number;
  /** From the kill to the proxy holding new connections: how long the death goes unnoticed. */
  detectMs: number;
  /** Async mode: how long the walsender is frozen before the kill (the standby's lag). */
  lagMs: number;
  seed: string;
  log: Logger;
  out: (line: string) => void;
}

export const FAILOVER_DEFAULTS: Omit<FailoverOptions, 'mode' | 'log' | 'out'> = {
  outboundMessages: 150,
  inboundMessages: 150,
  outboundCalls: 30,
  inboundCalls: 20,
  workers: 2,
  loadMs: 12_000,
  killAt: 0.4,
  detectMs: 500,
  lagMs: 700,
  seed: 'failover',
};

export interface FailoverResult {
  mode: ReplicationMode;
  /** Distinct carrier events answered 2xx by ingest. */
  acknowledged: number;
  /** Of those, missing on the new primary. */
  lost: number;
  /** Lost events whose message or call still reached the carrier's state: by asking the carrier, by a later event. */
  recoveredByReconciliation: number;
  recoveredByNextEvent: number;
  /** Lost events nothing brought back (an inbound SMS or call the carrier will not tell again). */
  lostForGood: number;
  lostForGoodByType: Record<string, number>;
  /** Messages and calls the API answered 201 for that are missing on the new primary. */
  apiCreatesLost: number;
  /** Of those, messages the carrier had accepted: sent, with no record of them left in Handset. */
  apiCreatesLostSentAtCarrier: number;
  /** Carrier event ids stored more than once on the new primary (must be 0). */
  storedTwice: number;
  /** Outbound messages and calls not at an end after quiescence (must be 0). */
  unfinished: number;
  /** ms from the kill. */
  timings: { promoted: number; switched: number; first200: number | null; firstProcessed: number | null };
  /** From the switch to the first carrier event processed, against the workers' crash-recovery bound. */
  resumeBoundMs: number;
  /** Jobs locked on the new primary when it took over, and how long after the switch until none was. */
  jobsLockedAtSwitch: number;
  locksReleasedAfterMs: number | null;
  /** Ingest answers that were not 2xx (retried by the carrier). */
  refused: number;
  unexpectedExits: string[];
  unhandledRejections: number;
  audit: AuditReport;
  seconds: number;
}

const OUR_NUMBER = '+13125550180';
const INBOUND_NUMBER = '+13125550181';
const SMS_TO = ['+15555550100', '+15555550101', '+15555550104'];
const CALL_TO = [['+15555550110', '+15555550113'], ['+15555550113'], ['+15555550112']];
const INBOUND_RING = ['+15555550111', '+15555550113'];

export async function runFailover(opts: FailoverOptions): Promise<FailoverResult> {
  const started = Date.now();
  const cleanups: (() => Promise<unknown>)[] = [];
  const exits: string[] = [];
  let stopping = false;
  let rejections = 0;
  const onRejection = () => rejections++;
  process.on('unhandledRejection', onRejection);
  const workers = new Set<ChildProcess>();
  try {
    const dir = await mkdtemp(path.join(tmpdir(), 'handset-failover-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const sync = opts.mode === 'sync';
    // fsync off (a process kill, not a power loss), but every commit waits for the standby in sync mode.
    const settings = { synchronous_commit: 'on', wal_keep_size: '256MB', max_wal_senders: '4' };
    const primary = await startEmbeddedPostgres({
      stateDir: path.join(dir, 'primary'),
      log: opts.log,
      durable: false,
      maxConnections: 300,
      settings,
    });
    cleanups.push(() => primary.stop().catch(() => undefined));
    const dbName = `handset_failover_${randomBytes(4).toString('hex')}`;
    const primaryDbUrl = await createDatabase(primary.url, dbName);
    const setup = createPool(primaryDbUrl, { max: 2, applicationName: 'failover-setup', log: opts.log });
    await migrate(setup, opts.log);
    const apiKeyForSetup = await withTx(setup, async (tx) => {
      const a = await accountCreate(tx, 'Failover');
      return (await apiKeyCreate(tx, a.id)).key;
    });
    await setup.end();

    const standby = await startEmbeddedStandby(primary, {
      stateDir: path.join(dir, 'standby'),
      log: opts.log,
      name: 'standby',
      settings,
    });
    cleanups.push(() => standby.stop());
    await replicating(primary, sync);

    const proxy = await startTcpProxy('127.0.0.1', primary.port);
    cleanups.push(() => proxy.close());
    const handsetDbUrl = withPort(primaryDbUrl, proxy.port);

    const sim = await startSimulator({ webhookUrl: null, timeScale: 0.05, seed: opts.seed, log: opts.log });
    cleanups.push(() => sim.close());
    const env: Record<string, string> = { ...sim.carrierEnv(), ...chaosRoleSettings() };
    const config = loadConfig(env, 'serve');
    const front = await startPlatform({ config, databaseUrl: handsetDbUrl, roles: ['ingest', 'api'], log: opts.log });
    cleanups.push(() => front.stop());
    sim.setWebhookUrl(`${front.ingestUrl}/webhooks/telnyx`);
    env.HANDSET_PUBLIC_INGEST_URL = front.ingestUrl!;

    const startWorker = () => {
      const child = spawn(
        process.execPath,
        ['--unhandled-rejections=strict', HANDSET_BIN, 'serve', '--roles', 'worker'],
        {
          env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env, DATABASE_URL: handsetDbUrl },
          stdio: ['ignore', 'ignore', 'inherit'],
        },
      );
      workers.add(child);
      child.on('exit', (code, signal) => {
        workers.delete(child);
        if (!stopping) exits.push(`worker pid ${child.pid}: exit ${code ?? signal}`);
      });
    };
    for (let i = 0; i < opts.workers; i++) startWorker();

    // The customer, whose client retries what the API could not answer, with the same key.
    const receiver = await startCountingReceiver();
    cleanups.push(() => receiver.close());
    const created = new Set<string>();
    const api = async (p: string, body: unknown) => {
      const key = randomBytes(12).toString('hex');
      for (let attempt = 0; ; attempt++) {
        try {
          const res = await fetch(front.apiUrl + p, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${apiKeyForSetup}`,
              'content-type': 'application/json',
              'idempotency-key': key,
            },
            body: JSON.stringify(body),
          });
          if (res.status === 201) {
            const { id } = (await res.json()) as { id: string };
            created.add(id);
            return id;
          }
          if (![409, 429, 503].includes(res.status)) throw new Error(`POST ${p}: ${res.status} ${await res.text()}`);
        } catch (err) {
          if (attempt > 400 || !/fetch failed|ECONN|socket/.test(String((err as Error).cause ?? err))) throw err;
        }
        await sleep(250);
      }
    };
    await api('/v1/phone_numbers', { number: OUR_NUMBER, carrier: 'telnyx' });
    await api('/v1/phone_numbers', {
      number: INBOUND_NUMBER,
      carrier: 'telnyx',
      inbound_ring: INBOUND_RING,
      ring_timeout_secs: 5,
    });
    await api('/v1/webhook_endpoints', { url: receiver.url });
    created.clear(); // made before any failover: only the storm's are counted

    // The storm, and the failover in the middle of it.
    opts.out(
      `${opts.mode}: ${opts.outboundMessages} SMS out, ${opts.inboundMessages} in, ${opts.outboundCalls} calls out, ${opts.inboundCalls} in over ${opts.loadMs / 1000} s; the primary dies at ${Math.round(opts.killAt * 100)}%`,
    );
    const work: (() => Promise<unknown>)[] = [];
    for (let i = 0; i < opts.outboundMessages; i++)
      work.push(() => api('/v1/messages', { from: OUR_NUMBER, to: SMS_TO[i % SMS_TO.length], body: `failover ${i}` }));
    for (let i = 0; i < opts.outboundCalls; i++)
      work.push(() => api('/v1/calls', { from: OUR_NUMBER, to: CALL_TO[i % CALL_TO.length], ring_timeout_secs: 5 }));
    for (let i = 0; i < opts.inboundMessages; i++) {
      const from = `+1415800${String(i).padStart(4, '0')}`;
      work.push(async () => sim.injectInboundSms({ from, to: OUR_NUMBER, text: `inbound ${i}` }));
    }
    for (let i = 0; i < opts.inboundCalls; i++) {
      const from = `+1415900${String(i).padStart(4, '0')}`;
      work.push(async () => sim.injectInboundCall({ from, to: INBOUND_NUMBER }));
    }
    shuffle(work);
    const gap = opts.loadMs / Math.max(1, work.length);
    const storm = Promise.all(
      work.map(async (w, i) => {
        await sleep(i * gap);
        await w();
      }),
    );

    await sleep(opts.loadMs * opts.killAt);
    if (!sync) {
      // The standby falls behind: the walsender frozen, the primary committing and acknowledging alone.
      const walsenders = await onServer(primary.url, 'SELECT pid FROM pg_stat_replication');
      for (const { pid } of walsenders) process.kill(Number(pid), 'SIGSTOP');
      await sleep(opts.lagMs);
    }
    const killedAt = Date.now();
    killHost(primary.pid);
    opts.out(`  primary SIGKILLed (postmaster ${primary.pid} and its backends)`);
    await sleep(opts.detectMs);
    proxy.cut(); // held: nothing reaches a dead or half-promoted server
    await standby.promote();
    const promotedAt = Date.now();
    // The promoted node would wait for itself; nothing is synchronous until a new standby joins.
    await onServer(standby.url, 'ALTER SYSTEM RESET synchronous_standby_names');
    await onServer(standby.url, 'SELECT pg_reload_conf()');
    proxy.switchTo(standby.port);
    const switchedAt = new Date();
    opts.out(
      `  standby promoted after ${promotedAt - killedAt} ms, the proxy switched after ${switchedAt.getTime() - killedAt} ms`,
    );

    const pool = createPool(withPort(primaryDbUrl, standby.port), {
      max: 4,
      applicationName: 'failover-run',
      log: opts.log,
    });
    cleanups.push(() => pool.end());
    const q = async (sql: string, values: unknown[] = []) =>
      Number((await pool.query<{ n: number }>(sql, values)).rows[0]!.n);
    const jobsLockedAtSwitch = await q(
      'SELECT count(*)::int AS n FROM graphile_worker._private_jobs WHERE locked_at IS NOT NULL',
    );
    let locksReleasedAfterMs: number | null = null;
    const locks = (async () => {
      for (let i = 0; i < 1200; i++) {
        const n = await q('SELECT count(*)::int AS n FROM graphile_worker._private_jobs WHERE locked_at < $1', [
          switchedAt,
        ]);
        if (n === 0) {
          locksReleasedAfterMs = Date.now() - switchedAt.getTime();
          return;
        }
        await sleep(100);
      }
    })();

    await storm;
    opts.out(`  storm sent after ${secondsSince(started)} s; waiting for quiescence…`);
    await locks;
    await quiescence(pool, sim, (l) => opts.out(l));
    opts.out(`  quiescent after ${secondsSince(started)} s`);
    stopping = true;
    for (const w of workers) w.kill('SIGTERM');

    // What the carrier was told 2xx, against what the new primary holds.
    const acked = new Map<string, { type: string; body: string; at: number }>();
    let refused = 0;
    let first200: number | null = null;
    for (const w of sim.webhooks) {
      if (w.status === null || w.status >= 300) {
        refused++;
        continue;
      }
      const at = Date.parse(w.at);
      if (at >= switchedAt.getTime() && (first200 === null || at < first200)) first200 = at;
      if (w.eventId && !acked.has(w.eventId)) acked.set(w.eventId, { type: w.eventType ?? '?', body: w.body, at });
    }
    const { rows: stored } = await pool.query<{ id: string }>(
      `SELECT carrier_event_id AS id FROM carrier_events WHERE carrier = 'telnyx'`,
    );
    const onNew = new Set(stored.map((r) => r.id));
    const lost = [...acked].filter(([id]) => !onNew.has(id));
    let byReconciliation = 0;
    let byNextEvent = 0;
    const forGood: Record<string, number> = {};
    for (const [, e] of lost) {
      const how = await recovered(pool, e.type, e.body);
      if (how === 'reconciliation') byReconciliation++;
      else if (how === 'next event') byNextEvent++;
      else forGood[e.type] = (forGood[e.type] ?? 0) + 1;
    }
    const ids = [...created];
    const { rows: present } = await pool.query<{ id: string }>(
      'SELECT id FROM messages WHERE id = ANY($1) UNION ALL SELECT id FROM calls WHERE id = ANY($1)',
      [ids],
    );
    const missing = new Set(ids);
    for (const { id } of present) missing.delete(id);
    // A send's Idempotency-Key is its message id.
    const sentAtCarrier = new Set(
      sim.requests
        .filter(
          (r) => r.path === '/v2/messages' && r.status === 200 && r.idempotencyKey && missing.has(r.idempotencyKey),
        )
        .map((r) => r.idempotencyKey),
    );
    const firstProcessed = await pool.query<{ at: Date | null }>(
      'SELECT min(processed_at) AS at FROM carrier_events WHERE processed_at >= $1',
      [switchedAt],
    );
    const audit = await runAudit(pool, {
      graceSeconds: 0,
      reconcile: {
        intervalMs: config.reconcileIntervalMs,
        afterMs: config.reconcileAfterMs,
        messageAfterMs: config.reconcileMessageAfterMs,
      },
    });
    return {
      mode: opts.mode,
      acknowledged: acked.size,
      lost: lost.length,
      recoveredByReconciliation: byReconciliation,
      recoveredByNextEvent: byNextEvent,
      lostForGood: Object.values(forGood).reduce((a, b) => a + b, 0),
      lostForGoodByType: forGood,
      apiCreatesLost: missing.size,
      apiCreatesLostSentAtCarrier: sentAtCarrier.size,
      storedTwice: await q(
        'SELECT count(*)::int AS n FROM (SELECT 1 FROM carrier_events GROUP BY carrier, carrier_event_id HAVING count(*) > 1) d',
      ),
      unfinished: await q(`SELECT (SELECT count(*) FROM messages WHERE status IN ('queued', 'scheduled'))
                                + (SELECT count(*) FROM calls WHERE status IN ('ringing', 'in_progress'))::int AS n`),
      timings: {
        promoted: promotedAt - killedAt,
        switched: switchedAt.getTime() - killedAt,
        first200: first200 === null ? null : first200 - killedAt,
        firstProcessed: firstProcessed.rows[0]?.at ? firstProcessed.rows[0].at.getTime() - killedAt : null,
      },
      resumeBoundMs: recoveryTimings(config.workerStaleAfterMs).rerunWithinMs,
      jobsLockedAtSwitch,
      locksReleasedAfterMs,
      refused,
      unexpectedExits: exits,
      unhandledRejections: rejections,
      audit,
      seconds: secondsSince(started),
    };
  } finally {
    stopping = true;
    for (const w of workers) w.kill('SIGKILL');
    process.off('unhandledRejection', onRejection);
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  }
}

/**
 * How the message or call a lost event was about reached its end on the new
 * primary anyway: a fact stored by asking the carrier, a later event, or not at
 * all (an inbound message or call the carrier told once, and nobody has).
 */
async function recovered(pool: pg.Pool, type: string, body: string): Promise<'reconciliation' | 'next event' | null> {
  const payload = (JSON.parse(body) as { data?: { payload?: Record<string, unknown> } }).data?.payload ?? {};
  const subject = String(type.startsWith('message.') ? payload.id : payload.call_control_id);
  const ended = type.startsWith('message.')
    ? `SELECT count(*)::int AS n FROM messages WHERE carrier_message_id = $1 AND status NOT IN ('queued', 'scheduled')`
    : `SELECT count(*)::int AS n FROM call_legs l JOIN calls c ON c.id = l.call_id
        WHERE (l.carrier_ref = $1 OR c.caller_ref = $1) AND c.status IN ('completed', 'missed')`;
  const { rows } = await pool.query<{ n: number }>(ended, [subject]);
  if (rows[0]!.n === 0) return null;
  const asked = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM carrier_events WHERE carrier_event_id LIKE 'reconcile:%' AND subject = $1`,
    [subject],
  );
  return asked.rows[0]!.n > 0 ? 'reconciliation' : 'next event';
}

/** Streaming, and in sync mode named synchronous and confirmed so, before any traffic. */
async function replicating(primary: EmbeddedPostgres, sync: boolean): Promise<void> {
  if (sync) {
    await onServer(primary.url, `ALTER SYSTEM SET synchronous_standby_names = 'standby'`);
    await onServer(primary.url, 'SELECT pg_reload_conf()');
  }
  for (let i = 0; i < 600; i++) {
    const rows = await onServer(primary.url, `SELECT state, sync_state FROM pg_stat_replication`);
    if (rows.some((r) => r.state === 'streaming' && (!sync || r.sync_state === 'sync'))) return;
    await sleep(100);
  }
  throw new Error('the standby did not start streaming within a minute');
}

/**
 * SIGKILL to the postmaster and every process it started, at once: the host died,
 * nothing shuts down. The children are listed first (once their parent is dead they
 * belong to init), synchronously, so the kills are not spread over a busy machine.
 */
function killHost(postmaster: number): void {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // pid (comm) state ppid …: comm may hold spaces, so read after its closing parenthesis.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === postmaster) children.push(Number(entry));
  }
  for (const pid of [postmaster, ...children]) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

export function failoverTable(results: readonly FailoverResult[]): string {
  const ms = (v: number | null) => (v === null ? '-' : `${v} ms`);
  const rows: [string, ...string[]][] = [
    ['mode', ...results.map((r) => r.mode)],
    ['carrier events acknowledged (200)', ...results.map((r) => String(r.acknowledged))],
    ['  missing on the new primary', ...results.map((r) => String(r.lost))],
    ['  recovered by reconciliation', ...results.map((r) => String(r.recoveredByReconciliation))],
    ['  recovered by a later event', ...results.map((r) => String(r.recoveredByNextEvent))],
    [
      '  lost for good',
      ...results.map(
        (r) =>
          `${r.lostForGood}${
            r.lostForGood
              ? ` (${Object.entries(r.lostForGoodByType)
                  .map(([t, n]) => `${t} ${n}`)
                  .join(', ')})`
              : ''
          }`,
      ),
    ],
    ['API 201s missing on the new primary', ...results.map((r) => String(r.apiCreatesLost))],
    ['  of them sent by the carrier', ...results.map((r) => String(r.apiCreatesLostSentAtCarrier))],
    ['carrier events stored twice', ...results.map((r) => String(r.storedTwice))],
    ['ingest answers refused (retried)', ...results.map((r) => String(r.refused))],
    ['kill → promoted', ...results.map((r) => ms(r.timings.promoted))],
    ['kill → proxy switched', ...results.map((r) => ms(r.timings.switched))],
    ['kill → first 200 after the switch', ...results.map((r) => ms(r.timings.first200))],
    ['kill → first event processed after it', ...results.map((r) => ms(r.timings.firstProcessed))],
    ['  crash-recovery bound from the switch', ...results.map((r) => ms(r.resumeBoundMs))],
    ['jobs locked at the switch', ...results.map((r) => String(r.jobsLockedAtSwitch))],
    ['  all released after', ...results.map((r) => ms(r.locksReleasedAfterMs))],
    ['messages and calls not at an end', ...results.map((r) => String(r.unfinished))],
    ['Handset processes that exited', ...results.map((r) => String(r.unexpectedExits.length))],
    ['unhandled rejections', ...results.map((r) => String(r.unhandledRejections))],
    ['audit violations', ...results.map((r) => String(r.audit.checks.reduce((n, c) => n + c.violations, 0)))],
    ['seconds', ...results.map((r) => String(r.seconds))],
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows
    .map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[0]!) : c.padStart(widths[i]!))).join('  '))
    .join('\n');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const secondsSince = (t: number) => Math.round((Date.now() - t) / 1000);

function shuffle<T>(a: T[]) {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
}
