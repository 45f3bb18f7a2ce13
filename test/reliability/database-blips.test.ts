// A database blip must never take Handset down. `handset serve` runs as a real
// process (with --unhandled-rejections=strict, like every process the tests
// start) with DATABASE_URL pointing through a TCP proxy that the test cuts at
// the moment a job is about to record its outcome. The process must stay up, and
// the job whose outcome could not be written must run again soon after the
// database is back — although its worker is alive and heartbeating.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { startJobRunner, type TaskHandler } from '../../src/jobs/runner.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { serveRoles, type HandsetProcess } from '../support/process.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

const OUR = '+13125550610';
const STALE_AFTER_MS = 3000;
/** How long a send may take before its outcome is unknown: short, so a dispatch lease runs out soon. */
const CARRIER_TIMEOUT_MS = 2000;

let db: TestDatabase;
let proxy: TcpProxy;
let sim: Simulator;
const procs: HandsetProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  proxy = await startTcpProxy('127.0.0.1', Number(new URL(db.url).port));
  sim = await startSimulator({ webhookUrl: null, seed: 'blips' });
});
afterAll(async () => {
  for (const p of procs) p.child.kill('SIGKILL');
  await sim.close();
  await proxy.close();
  await db.drop();
});

function proxiedUrl(): string {
  const u = new URL(db.url);
  u.port = String(proxy.port);
  return u.toString();
}

/** A job runner in this process whose database is reached through the proxy, with its own pool and metrics. */
async function runnerThroughProxy(concurrency: number, maintenance: TaskHandler<'maintenance'>) {
  const pool = createPool(proxiedUrl(), { max: concurrency + 5, applicationName: 'blips-runner' });
  const metrics = new Metrics({ defaultMetrics: false });
  const runner = await startJobRunner({
    pool,
    log: createLogger(process.env.TEST_LOG_LEVEL ?? 'silent'),
    metrics,
    concurrency,
    staleAfterMs: STALE_AFTER_MS,
    tasks: { maintenance },
  });
  return { pool, metrics, runner };
}

/** Jobs of the runner tests still in the queue: waiting, running or locked by a pool. */
const maintenanceJobsLeft = async () =>
  (await db.pool.query(`SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE task_identifier = 'maintenance'`))
    .rows[0].n as number;

const serve = (roles: string) =>
  serveRoles(roles, {
    DATABASE_URL: proxiedUrl(),
    HANDSET_WORKER_STALE_AFTER: `${STALE_AFTER_MS}ms`,
    HANDSET_CARRIER_TIMEOUT: `${CARRIER_TIMEOUT_MS}ms`,
    HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'true',
    ...sim.carrierEnv(),
  }).then((s) => {
    procs.push(s.proc);
    return s;
  });

describe('a database blip during a job', () => {
  let all: Awaited<ReturnType<typeof serve>>;
  let acme: ApiClient;

  beforeAll(async () => {
    all = await serve('ingest,api,worker');
    sim.setWebhookUrl(`${all.ingestUrl}/webhooks/telnyx`);
    acme = await createAccount(db.pool, all.apiUrl!, 'Blips');
    expect((await acme.post('/v1/phone_numbers', { number: OUR })).status).toBe(201);
  });
  afterAll(async () => {
    all.proc.child.kill('SIGTERM');
    expect((await all.proc.exited).code).toBe(0);
  });

  it('a dispatch failing while every database connection is cut does not stop the process, and the message is sent once the database is back', async () => {
    // The carrier takes a second to answer, and answers 503: the job then has to
    // record its retry — exactly when the proxy has cut every connection.
    sim.setBehaviour({ sendLatencyMs: 1000, serverErrorRate: 1 });
    const created = await acme.post('/v1/messages', { from: OUR, to: '+15555550100', body: 'blip' });
    expect(created.status).toBe(201);
    await eventually(async () => sim.requests.some((r) => r.path === '/v2/messages' && r.status === null), 10_000, 10);
    proxy.cut();
    await new Promise((r) => setTimeout(r, 1500));
    // Meanwhile the API says so, as problem+json, instead of a 500 or a hang.
    const during = await acme.get('/v1/messages');
    expect(during.status).toBe(503);
    expect(during.json.code).toBe('service_unavailable');
    expect(during.headers.get('retry-after')).toBe('1');
    await new Promise((r) => setTimeout(r, 1500));
    sim.setBehaviour({ sendLatencyMs: 0, serverErrorRate: 0 });
    proxy.restore();
    const restoredAt = Date.now();

    // Nothing exited, and the API answers again.
    expect(all.alive(), all.proc.output().slice(-3000)).toBe(true);
    await eventually(async () => (await request(all.apiUrl!, 'GET', '/readyz', null)).status === 200, 20_000);
    // The job whose failure could not be written runs again within the recovery bound, not hours later.
    const m = await eventually(async () => {
      const got = (await acme.get(`/v1/messages/${created.json.id}`)).json;
      return got.status === 'delivered' ? got : null;
    }, 30_000);
    expect(m.status).toBe('delivered');
    // A batched dispatcher's message is its own until its lease (the stale bound and two carrier
    // timeouts) runs out; then the sweep hands it to a job.
    expect(Date.now() - restoredAt).toBeLessThan(STALE_AFTER_MS * 3 + 2 * CARRIER_TIMEOUT_MS + 15_000);
    expect(all.alive()).toBe(true);
  });
});

describe('a job whose completion cannot be written', () => {
  it('runs again once the database is back (at least once), and the runner keeps running', async () => {
    const runs: number[] = [];
    // Succeeds, and cuts the database just as graphile-worker is about to record that.
    const { pool, metrics, runner } = await runnerThroughProxy(2, async () => {
      runs.push(Date.now());
      if (runs.length === 1) {
        proxy.cut();
        setTimeout(() => proxy.restore(), 1500);
      }
    });
    try {
      await db.pool.query(`SELECT graphile_worker.add_job('maintenance', '{}'::json)`);
      await eventually(async () => runs.length >= 2, 30_000);
      await eventually(async () => (await maintenanceJobsLeft()) === 0, 30_000);
      expect(runs.length).toBe(2);
      expect((await metrics.runnerRestarts.get()).values[0]!.value).toBeGreaterThanOrEqual(1);
      // The restarted runner takes new work.
      await db.pool.query(`SELECT graphile_worker.add_job('maintenance', '{}'::json)`);
      await eventually(async () => runs.length === 3, 30_000);
    } finally {
      await runner.stop();
      await pool.end();
    }
  });
});

describe('two failures that cannot be written, while a third job still runs', () => {
  // graphile-worker records failures in batches, and a batch it cannot write shuts
  // the pool down. A second such batch in the same outage leaves its count of
  // batches in flight below zero; a shutdown that gets to wait on that count (a job
  // still running kept it open until then) waits forever, and the jobs stay locked
  // by a pool that is alive and heartbeating. The runner must not wait on it.
  it('the runner still restarts once the database is back, and the failed jobs run again', async () => {
    const runs: string[] = [];
    // A job's first run waits here to be told how to end.
    const gates = new Map<string, (end: 'fail' | 'succeed') => void>();
    const { pool, metrics, runner } = await runnerThroughProxy(3, async (_payload, job) => {
      runs.push(String(job.jobId));
      if (job.attempts > 1) return;
      const end = await new Promise<'fail' | 'succeed'>((resolve) => gates.set(String(job.jobId), resolve));
      if (end === 'fail') throw new Error('failing while the database is away');
    });
    let fatal = 0;
    runner.events.on('pool:fatalError', () => fatal++);
    try {
      await db.pool.query(`SELECT graphile_worker.add_job('maintenance', '{}'::json) FROM generate_series(1, 3)`);
      await eventually(async () => gates.size === 3, 10_000, 10);
      const [a, b, c] = [...gates.keys()] as [string, string, string];
      proxy.cut();
      gates.get(a)!('fail');
      await eventually(async () => fatal === 1, 10_000, 10);
      gates.get(b)!('fail');
      await eventually(async () => fatal === 2, 10_000, 10);
      proxy.restore();
      gates.get(c)!('succeed');

      // The two failed jobs run again, and nothing is left locked or waiting.
      await eventually(async () => runs.length === 5, 30_000);
      expect(runs.toSorted()).toEqual([a, a, b, b, c].toSorted());
      await eventually(async () => (await maintenanceJobsLeft()) === 0, 30_000);
      expect((await metrics.runnerRestarts.get()).values[0]!.value).toBe(1);
    } finally {
      proxy.restore();
      for (const open of gates.values()) open('succeed');
      await runner.stop();
      await pool.end();
    }
  });
});
