// The soak: a real Handset (the API, ingest and two worker processes, as an
// operator starts them) under a steady mix of traffic for a long while: inbound
// SMS and calls, sends with receipts, outbound calls, customer deliveries to a
// healthy, a slow and a failing endpoint. One worker is SIGKILLed and restarted
// on a schedule, and every database connection is cut for a few seconds on
// another. Each interval it samples every role's RSS, heap, event-loop delay, open
// file descriptors and database connections, and the backlog; at the end it
// drains, audits, and judges growth (samples.ts).
//
// The worker that is killed starts afresh each time, so it is drawn but not
// judged for growth; the other worker lives through the whole run. Database
// connections are counted by application name, so the worker's line counts both
// worker processes.

import { randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { accountCreate, apiKeyCreate } from '../../accounts/accounts.js';
import { runAudit, type AuditReport } from '../../audit/audit.js';
import { createDatabase, dropDatabase } from '../../db/databases.js';
import { freePort } from '../../db/embedded.js';
import { migrate } from '../../db/migrate.js';
import { createPool } from '../../db/pool.js';
import { withTx } from '../../db/tx.js';
import { newSecretKey } from '../../delivery/keyring.js';
import { startSimulator } from '../../sim/simulator.js';
import type { Logger } from '../../telemetry/log.js';
import { spawnRole, type RoleEnv, type RoleProcess } from '../bench/roles.js';
import { quiescence } from '../chaos/chaos.js';
import { runServer } from '../chaos/server.js';
import { startTcpProxy } from '../chaos/tcp-proxy.js';
import { ENDPOINT_KINDS, startSoakEndpoints } from './endpoints.js';
import { judgeGrowth, type GrowthVerdict, type RoleFigures, type Sample } from './samples.js';

const PROBE = fileURLToPath(new URL('./probe.js', import.meta.url));
const MINUTE = 60_000;

/** The roles sampled, in the picture's order; the first three are judged for growth. */
export const SOAK_ROLES = ['api', 'ingest', 'worker', 'worker-killed'] as const;
export const JUDGED_ROLES = ['api', 'ingest', 'worker'] as const;
type SoakRole = (typeof SOAK_ROLES)[number];
/** Whose connections each role's line counts (pg_stat_activity.application_name). */
const APPLICATIONS: Record<SoakRole, string[]> = {
  api: ['handset-api'],
  ingest: ['handset-ingest'],
  worker: ['handset-worker', 'handset-relay', 'handset-delivery'],
  'worker-killed': [],
};

/**
 * Half the bench's end-to-end peak (a campaign: API → carrier → receipts →
 * customer webhooks, about 69 messages/s in docs/performance.md), in operations a
 * second of the mix below.
 */
export const DEFAULT_RATE = 34;
/** Four sends for every two inbound SMS, one outbound and one inbound call. */
const MIX = ['sms-out', 'sms-in', 'sms-out', 'call-out', 'sms-out', 'sms-in', 'call-in', 'sms-out'] as const;
const SMS_TO = ['+15555550100', '+15555550101', '+15555550102', '+15555550103', '+15555550104', '+15555550105'];
const CALL_TO = [['+15555550113'], ['+15555550110', '+15555550113'], ['+15555550112'], ['+15555550111']];
const OUR_NUMBER = '+13125550180';
const INBOUND_NUMBER = '+13125550181';

export interface SoakSchedule {
  killEveryMs: number;
  cutEveryMs: number;
  cutMs: number;
  sampleEveryMs: number;
}

/**
 * A kill every 5 minutes and a 5-second cut every 10, sampled every minute; a run
 * too short for that has them scaled (kills every fifth, cuts every half, ten
 * samples, cuts a quarter of a sample interval long). Kills and cuts fall half an
 * interval off the samples, so no sample is taken mid-cut.
 */
export function soakSchedule(durationMs: number): SoakSchedule {
  return {
    killEveryMs: Math.min(5 * MINUTE, durationMs / 5),
    cutEveryMs: Math.min(10 * MINUTE, durationMs / 2),
    cutMs: Math.min(5_000, durationMs / 40),
    sampleEveryMs: Math.min(MINUTE, durationMs / 10),
  };
}

export interface SoakOptions {
  durationMs: number;
  /** Operations a second (see MIX). */
  rate: number;
  schedule: SoakSchedule;
  /** How long the drain may take before what is left counts as stuck. */
  drainMs: number;
  /** A PostgreSQL server to make a database in; null: an embedded one. */
  databaseUrl: string | null;
  seed: string;
  log: Logger;
  out: (line: string) => void;
  /**
   * Where each judged role writes a heap snapshot after the last sample (heap-diff.ts
   * compares it with one of a short run); none when absent. Only then: a snapshot
   * pauses its process, and its RSS stays about 100 MB higher afterwards (measured),
   * which would read as growth in any sample after it.
   */
  heapSnapshotDir?: string;
}

export interface SoakResult {
  samples: Sample[];
  growth: GrowthVerdict;
  /** What the drain left (empty: nothing). */
  stuck: string;
  audit: AuditReport;
  /** Handset processes that exited without being killed by the soak. */
  exits: string[];
  counts: {
    operations: number;
    /** Operations not even started because 500 were still waiting for an answer: the machine fell behind. */
    shed: number;
    apiFailures: number;
    kills: number;
    cuts: number;
    endpointRequests: Record<string, number>;
    messages: number;
    calls: number;
    carrierEvents: number;
    deliveries: number;
  };
  /** Every reason to fail; empty: the soak passed. */
  failures: string[];
}

export async function runSoak(opts: SoakOptions): Promise<SoakResult> {
  const { schedule } = opts;
  const cleanups: (() => Promise<unknown>)[] = [];
  const cleanup = async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  };
  try {
    const adminUrl = await runServer(opts.databaseUrl, {
      prefix: 'handset-soak',
      maxConnections: 200,
      log: opts.log,
      cleanups,
    });
    const dbName = `handset_soak_${randomBytes(4).toString('hex')}`;
    const databaseUrl = await createDatabase(adminUrl, dbName);
    cleanups.push(() => dropDatabase(adminUrl, dbName));
    const pool = createPool(databaseUrl, { max: 4, applicationName: 'handset-soak', log: opts.log });
    cleanups.push(() => pool.end());
    await migrate(pool, opts.log);
    // Handset reaches the database through a proxy the soak cuts; the soak's own reads go straight to it.
    const target = new URL(databaseUrl);
    const proxy = await startTcpProxy(target.hostname, Number(target.port));
    cleanups.push(() => proxy.close());
    target.port = String(proxy.port);

    const sim = await startSimulator({
      webhookUrl: null,
      timeScale: 0.05,
      seed: opts.seed,
      behaviour: { duplicateRate: 0.1 },
      log: opts.log,
    });
    cleanups.push(() => sim.close());
    const carrier = sim.carrierEnv();
    const roleEnv: RoleEnv = {
      databaseUrl: target.toString(),
      telnyxPublicKey: sim.publicKeyBase64,
      secretKey: newSecretKey(),
      extra: {
        ...carrier,
        HANDSET_CARRIER_RETRY_AFTER: '1s',
        HANDSET_CARRIER_TIMEOUT: '3s',
        HANDSET_WORKER_STALE_AFTER: '3s',
        HANDSET_DELIVERY_RETRY_SCHEDULE: '500ms,1s,2s,5s',
        HANDSET_RECONCILE_INTERVAL: '5s',
        HANDSET_RECONCILE_AFTER: '5s',
        HANDSET_RECONCILE_MESSAGE_AFTER: '10s',
      },
    };
    const procs = new Map<SoakRole, { p: RoleProcess; metricsUrl: string }>();
    const snapshotArgs = opts.heapSnapshotDir
      ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${opts.heapSnapshotDir}`]
      : [];
    const startRole = async (role: SoakRole) => {
      if (role === 'api' || role === 'ingest') {
        const p = await spawnRole(role, roleEnv, { nodeArgs: snapshotArgs });
        procs.set(role, { p, metricsUrl: `${p.url}/metrics` });
        return;
      }
      const port = await freePort();
      const p = await spawnRole(
        'worker',
        { ...roleEnv, extra: { ...roleEnv.extra, SOAK_PROBE_PORT: String(port) } },
        { nodeArgs: ['--import', PROBE, ...(role === 'worker' ? snapshotArgs : [])] },
      );
      procs.set(role, { p, metricsUrl: `http://127.0.0.1:${port}/metrics` });
    };
    cleanups.push(async () => Promise.all([...procs.values()].map(({ p }) => p.stop())));
    await startRole('ingest');
    const ingestUrl = procs.get('ingest')!.p.url!;
    sim.setWebhookUrl(`${ingestUrl}/webhooks/telnyx`);
    roleEnv.extra!.HANDSET_PUBLIC_INGEST_URL = ingestUrl;
    await Promise.all([startRole('api'), startRole('worker'), startRole('worker-killed')]);
    const apiUrl = procs.get('api')!.p.url!;

    // The customer: one account, two numbers, the three endpoints. Its client retries what the
    // API could not answer (503 while the database is cut) with the same Idempotency-Key.
    const endpoints = await startSoakEndpoints();
    cleanups.push(() => endpoints.close());
    const apiKey = await withTx(pool, async (tx) => (await apiKeyCreate(tx, (await accountCreate(tx, 'Soak')).id)).key);
    let apiFailures = 0;
    let lastApiFailure = '';
    const api = async (p: string, body: unknown) => {
      const key = randomBytes(12).toString('hex');
      const giveUpAt = Date.now() + 2 * MINUTE;
      for (;;) {
        let why: string;
        try {
          const res = await fetch(apiUrl + p, {
            method: 'POST',
            headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
            body: JSON.stringify(body),
            signal: AbortSignal.timeout(30_000),
          });
          if (res.status === 201) return void (await res.arrayBuffer());
          why = `POST ${p}: ${res.status} ${await res.text()}`;
          if (![409, 429, 503].includes(res.status)) throw new Error(why);
        } catch (err) {
          why = String((err as Error).cause ?? err);
          if (!/fetch failed|ECONN|socket|timeout|aborted|POST .*: (409|429|503)/i.test(why)) throw err;
        }
        if (Date.now() > giveUpAt) throw new Error(`gave up after 2 minutes: ${why}`);
        await sleep(250);
      }
    };
    await api('/v1/phone_numbers', { number: OUR_NUMBER, carrier: 'telnyx' });
    await api('/v1/phone_numbers', {
      number: INBOUND_NUMBER,
      carrier: 'telnyx',
      inbound_ring: ['+15555550111', '+15555550113'],
      ring_timeout_secs: 5,
    });
    // Every event to the healthy one; the slow and the failing one a share of the kinds.
    await api('/v1/webhook_endpoints', { url: endpoints.url('healthy') });
    await api('/v1/webhook_endpoints', {
      url: endpoints.url('slow'),
      event_types: ['message.received', 'call.completed', 'call.missed'],
    });
    await api('/v1/webhook_endpoints', {
      url: endpoints.url('failing'),
      event_types: ['message.delivered', 'message.failed', 'call.answered'],
    });

    const started = Date.now();
    const endAt = started + opts.durationMs;
    const running = () => Date.now() < endAt;
    opts.out(
      `soak: ${opts.rate} operations/s for ${Math.round(opts.durationMs / 1000)} s; a worker SIGKILLed every ${schedule.killEveryMs / 1000} s, the database cut for ${schedule.cutMs / 1000} s every ${schedule.cutEveryMs / 1000} s, samples every ${schedule.sampleEveryMs / 1000} s`,
    );

    // The load: operations issued on a steady clock, never more than 500 awaiting an answer.
    let issued = 0;
    let shed = 0;
    const inFlight = new Set<Promise<void>>();
    const operation = (n: number): Promise<void> => {
      const kind = MIX[n % MIX.length]!;
      const from = `+1415${String(n).padStart(7, '0')}`;
      if (kind === 'sms-in')
        return Promise.resolve(void sim.injectInboundSms({ from, to: OUR_NUMBER, text: `soak ${n}` }));
      if (kind === 'call-in') return Promise.resolve(void sim.injectInboundCall({ from, to: INBOUND_NUMBER }));
      if (kind === 'sms-out')
        return api('/v1/messages', { from: OUR_NUMBER, to: SMS_TO[n % SMS_TO.length], body: `soak ${n}` });
      return api('/v1/calls', { from: OUR_NUMBER, to: CALL_TO[n % CALL_TO.length], ring_timeout_secs: 5 });
    };
    const load = (async () => {
      while (running()) {
        const due = Math.floor(((Date.now() - started) * opts.rate) / 1000);
        for (; issued < due; issued++) {
          if (inFlight.size >= 500) {
            shed++;
            continue;
          }
          const p: Promise<void> = operation(issued)
            .catch((err: Error) => {
              apiFailures++;
              lastApiFailure = err.message;
            })
            .finally(() => inFlight.delete(p));
          inFlight.add(p);
        }
        await sleep(100);
      }
    })();

    // The faults, half a sample interval off the samples.
    const at = async (ms: number) => {
      const wait = started + ms - Date.now();
      if (wait > 0) await sleep(wait);
    };
    const offset = schedule.sampleEveryMs / 2;
    const exits: string[] = [];
    let kills = 0;
    const killer = (async () => {
      for (let i = 1; i * schedule.killEveryMs + offset < opts.durationMs; i++) {
        await at(i * schedule.killEveryMs + offset);
        // A worker whose last restart failed is gone already: it is started again, not killed.
        const victim = procs.get('worker-killed')!.p.pid;
        if (alive(victim)) {
          process.kill(victim, 'SIGKILL');
          kills++;
        }
        // A start can miss its 30 s on a loaded machine: three tries before it counts as a failure.
        for (let attempt = 1; attempt <= 3; attempt++) {
          const failed = await startRole('worker-killed').then(
            () => null,
            (err: Error) => err.message.split('\n')[0]!,
          );
          if (failed === null) break;
          if (attempt === 3) exits.push(`worker-killed did not restart: ${failed}`);
        }
      }
    })();
    let cuts = 0;
    const cutter = (async () => {
      for (let i = 1; i * schedule.cutEveryMs + offset < opts.durationMs; i++) {
        await at(i * schedule.cutEveryMs + offset);
        proxy.cut();
        cuts++;
        await sleep(schedule.cutMs);
        proxy.restore();
      }
    })();

    // The samples, and any process that went away on its own.
    const samples: Sample[] = [];
    const last = Math.floor(opts.durationMs / schedule.sampleEveryMs);
    for (let i = 0; i <= last; i++) {
      let readings: Readings = new Map();
      for (let j = 1; i > 0 && j < READINGS; j++) {
        await at((i - 1 + j / READINGS) * schedule.sampleEveryMs);
        readings = combine(readings, await readAll(pool, procs));
      }
      await at(i * schedule.sampleEveryMs);
      readings = combine(readings, await readAll(pool, procs));
      const s = await takeSample(pool, procs, Date.now() - started, readings);
      samples.push(s);
      for (const role of JUDGED_ROLES) if (!alive(procs.get(role)!.p.pid)) exits.push(`${role} exited on its own`);
      if (exits.some((e) => e.endsWith('on its own'))) break;
      opts.out(`  ${formatSample(s)}`);
      if (opts.heapSnapshotDir && i === last) {
        for (const role of JUDGED_ROLES) process.kill(procs.get(role)!.p.pid, 'SIGUSR2');
        const whose = JUDGED_ROLES.map((role) => `${role} (pid ${procs.get(role)!.p.pid})`).join(', ');
        opts.out(`  heap snapshots of ${whose} asked for, into ${opts.heapSnapshotDir}`);
      }
    }
    await load;
    await Promise.all(inFlight);
    await Promise.all([killer, cutter]);
    proxy.restore();
    opts.out(`load stopped after ${Math.round((Date.now() - started) / 1000)} s; draining…`);

    let stuck = '';
    try {
      await quiescence(pool, sim, opts.out, opts.drainMs);
    } catch (err) {
      stuck = (err as Error).message;
    }
    for (const role of JUDGED_ROLES)
      if (!alive(procs.get(role)!.p.pid) && !exits.includes(`${role} exited on its own`))
        exits.push(`${role} exited on its own`);
    const audit = await runAudit(pool, {
      graceSeconds: 0,
      reconcile: { intervalMs: 5_000, afterMs: 5_000, messageAfterMs: 10_000 },
    });
    const growth = judgeGrowth(samples, opts.durationMs, JUDGED_ROLES);
    const q = async (sql: string) => Number((await pool.query<{ n: number }>(sql)).rows[0]!.n);
    const failures = [
      ...growth.failures,
      ...(stuck ? [`stuck work after the drain: ${stuck}`] : []),
      ...(audit.ok
        ? []
        : audit.checks.filter((c) => c.violations > 0).map((c) => `audit: ${c.key}: ${c.violations} violations`)),
      ...exits,
      ...(apiFailures > 0 ? [`${apiFailures} API requests failed for good (last: ${lastApiFailure})`] : []),
    ];
    return {
      samples,
      growth,
      stuck,
      audit,
      exits,
      counts: {
        operations: issued - shed,
        shed,
        apiFailures,
        kills,
        cuts,
        endpointRequests: Object.fromEntries(ENDPOINT_KINDS.map((k) => [k, endpoints.requests[k]])),
        messages: await q('SELECT count(*)::int AS n FROM messages'),
        calls: await q('SELECT count(*)::int AS n FROM calls'),
        carrierEvents: await q('SELECT count(*)::int AS n FROM carrier_events'),
        deliveries: await q('SELECT count(*)::int AS n FROM webhook_deliveries'),
      },
      failures,
    };
  } finally {
    await cleanup();
  }
}

type Procs = Map<SoakRole, { p: RoleProcess; metricsUrl: string }>;
/** Each role's process's figures, by pid (a restarted worker starts over). */
type Readings = Map<SoakRole, RoleFigures>;
/**
 * One reading says little of figures that follow the load from second to second: a
 * pool opens connections as work comes and closes them idle, and the heap rises and
 * falls with every garbage collection. So a sample combines six readings over its
 * interval: the highest descriptors, connections and loop delay (the ceiling a leak
 * raises), the lowest heap used (the live set a leak raises), the last RSS.
 */
const READINGS = 6;

async function readAll(pool: pg.Pool, procs: Procs): Promise<Readings> {
  const { rows: conns } = await pool.query<{ name: string; n: number }>(
    `SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() GROUP BY 1`,
  );
  const readings: Readings = new Map();
  await Promise.all(
    SOAK_ROLES.map(async (role) => {
      const proc = procs.get(role);
      if (!proc) return;
      const apps = APPLICATIONS[role];
      readings.set(role, {
        ...(await processFigures(proc.p.pid, proc.metricsUrl)),
        dbConnections: apps.length ? conns.filter((c) => apps.includes(c.name)).reduce((n, c) => n + c.n, 0) : null,
      });
    }),
  );
  return readings;
}

function combine(earlier: Readings, latest: Readings): Readings {
  const pick = (f: (x: number, y: number) => number) => (x: number | null, y: number | null) =>
    x === null ? y : y === null ? x : f(x, y);
  const [max, min] = [pick(Math.max), pick(Math.min)];
  const out: Readings = new Map(latest);
  for (const [role, was] of earlier) {
    const now = latest.get(role);
    if (now && now.pid === was.pid)
      out.set(role, {
        pid: now.pid,
        rssBytes: now.rssBytes ?? was.rssBytes,
        heapUsedBytes: min(was.heapUsedBytes, now.heapUsedBytes),
        loopDelayP99Ms: max(was.loopDelayP99Ms, now.loopDelayP99Ms),
        openFds: max(was.openFds, now.openFds),
        dbConnections: max(was.dbConnections, now.dbConnections),
      });
  }
  return out;
}

async function takeSample(pool: pg.Pool, procs: Procs, atMs: number, readings: Readings): Promise<Sample> {
  const { rows } = await pool.query<Sample['backlog']>(`
    SELECT (SELECT count(*) FROM graphile_worker.jobs WHERE run_at <= now() AND attempts < max_attempts)::int AS "jobsDue",
           (SELECT count(*) FROM carrier_events WHERE processed_at IS NULL)::int AS "carrierEventsUnprocessed",
           (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')::int AS "deliveriesPending",
           (SELECT count(*) FROM messages WHERE status IN ('queued', 'scheduled'))::int AS "messagesQueued"`);
  const roles: Record<string, RoleFigures> = {};
  for (const role of SOAK_ROLES) {
    const r = readings.get(role);
    if (r && r.pid === procs.get(role)?.p.pid) roles[role] = r;
  }
  return { atMs, roles, backlog: rows[0]! };
}

/** RSS and descriptors as the kernel counts them; heap and loop delay as the process reports them. */
async function processFigures(pid: number, metricsUrl: string): Promise<Omit<RoleFigures, 'dbConnections'>> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const rssKb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN);
  const fds = await readdir(`/proc/${pid}/fd`).then(
    (f) => f.length,
    () => null,
  );
  const text = await fetch(metricsUrl, { signal: AbortSignal.timeout(10_000) })
    .then((r) => r.text())
    .catch(() => '');
  const metric = (name: string) => {
    const m = new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(text);
    return m ? Number(m[1]) : null;
  };
  const lag = metric('nodejs_eventloop_lag_p99_seconds');
  return {
    pid,
    rssBytes: Number.isFinite(rssKb) ? rssKb * 1024 : null,
    heapUsedBytes: metric('nodejs_heap_size_used_bytes'),
    loopDelayP99Ms: lag === null ? null : lag * 1000,
    openFds: fds,
  };
}

export function formatSample(s: Sample): string {
  const mb = (v: number | null) => (v === null ? '-' : `${Math.round(v / 2 ** 20)}M`);
  const roles = Object.entries(s.roles)
    .map(
      ([r, f]) =>
        `${r} ${mb(f.rssBytes)}/${mb(f.heapUsedBytes)} ${f.loopDelayP99Ms?.toFixed(0) ?? '-'}ms ${f.openFds ?? '-'}fd ${f.dbConnections ?? '-'}db`,
    )
    .join(' | ');
  const b = s.backlog;
  return `${(s.atMs / 60_000).toFixed(1)} min: ${roles} | jobs ${b.jobsDue} events ${b.carrierEventsUnprocessed} deliveries ${b.deliveriesPending} queued ${b.messagesQueued}`;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
