// A worker paused past HANDSET_WORKER_STALE_AFTER (a frozen VM, a long
// stop-the-world) has its jobs unlocked by another worker's sweeper while it is
// still inside one. When it wakes and finishes, its completion must not remove
// what the job has become meanwhile: a retry it scheduled under its own key (the
// add found the job unlocked and rewrote that row in place), or the run another
// worker has taken since. The sweep is what another worker's sweeper does to a
// silent pool (unlockPools); the runners, jobs and database are real.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { enqueue } from '../../src/jobs/enqueue.js';
import { unlockPools } from '../../src/jobs/heartbeats.sql.js';
import { type JobRunner, type TaskRegistry, startJobRunner } from '../../src/jobs/runner.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';

let db: TestDatabase;
const runners: JobRunner[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
});
// Each test's runners stop with it: a runner left running would take the next test's jobs.
afterEach(async () => {
  for (const r of runners.splice(0)) await r.stop();
});
afterAll(async () => {
  await db.drop();
});

const runner = async (tasks: TaskRegistry, concurrency = 1) => {
  const r = await startJobRunner({
    pool: db.pool,
    log: createLogger(process.env.TEST_LOG_LEVEL ?? 'silent'),
    metrics: new Metrics({ defaultMetrics: false }),
    // One slot unless asked: while its job runs, such a pool cannot take that job a second time itself.
    concurrency,
    staleAfterMs: 30_000,
    pollIntervalMs: 100,
    tasks,
  });
  runners.push(r);
  return r;
};

/** A promise and the function that settles it. */
const gate = () => {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { open, opened };
};

const jobRows = async (key: string) =>
  (
    await db.pool.query<{ id: string; locked_by: string | null; run_at: Date }>(
      'SELECT id, locked_by, run_at FROM graphile_worker.jobs WHERE key = $1',
      [key],
    )
  ).rows;

describe('a worker whose lock was swept while it ran', () => {
  it('(unswept) a run that schedules its next run under its own key completes, and the next run comes', async () => {
    // An add under the key of a running job takes the key for a new job and sets the running
    // one's attempts to its maximum: the guarded completion must still recognise its own run.
    const key = 'stale-completion:unswept';
    const runs: string[] = [];
    const done = gate();
    const a = await runner({
      'delivery.recover': async (payload, job) => {
        runs.push(job.jobId);
        if (runs.length === 1) await withTx(db.pool, (tx) => enqueue(tx, 'delivery.recover', payload, { jobKey: key }));
        else done.open();
      },
    });
    const outcomes: (string | null)[] = [];
    a.events.on('job:complete', ({ error }) => outcomes.push(error ? String(error) : null));
    await withTx(db.pool, (tx) => enqueue(tx, 'delivery.recover', { recoveryId: 'r-0' }, { jobKey: key }));
    await done.opened;
    await eventually(async () => outcomes.length === 2 && (await jobRows(key)).length === 0);
    expect(outcomes).toEqual([null, null]);
    expect(new Set(runs).size).toBe(2);
    expect(await db.pool.query('SELECT count(*)::int AS n FROM graphile_worker.jobs')).toMatchObject({
      rows: [{ n: 0 }],
    });
  });

  it('the next run it schedules under its own key after the sweep survives its completion', async () => {
    const key = 'stale-completion:retry';
    const started = gate();
    const resume = gate();
    const finished = gate();
    let ran = 0;
    const a = await runner({
      'delivery.recover': async (payload) => {
        if (ran++ > 0) return;
        started.open();
        await resume.opened;
        // One batch done: the next, a minute out, under the job's own key (as a recovery re-enqueues itself).
        await withTx(db.pool, (tx) =>
          enqueue(tx, 'delivery.recover', payload, { jobKey: key, runAt: new Date(Date.now() + 60_000) }),
        );
      },
    });
    a.events.on('job:complete', () => finished.open());
    await withTx(db.pool, (tx) => enqueue(tx, 'delivery.recover', { recoveryId: 'r-1' }, { jobKey: key }));
    await started.opened;

    await unlockPools(db.pool, [a.poolId!]);
    resume.open();
    await finished.opened;
    // graphile-worker writes the outcome just after it says the job is complete.
    await new Promise((r) => setTimeout(r, 300));

    const rows = await jobRows(key);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.locked_by).toBeNull();
    expect(rows[0]!.run_at.getTime()).toBeGreaterThan(Date.now() + 30_000);
  });

  it.each([
    ['another worker process', false],
    ['another worker of its own pool', true],
  ])('a run %s took after the sweep is not completed by the first', async (_, samePool) => {
    const key = `stale-completion:taken:${samePool}`;
    const deliveryId = `d-${samePool}`;
    const runs: number[] = [];
    const started = [gate(), gate()];
    const resume = [gate(), gate()];
    const finished = [gate(), gate()];
    const tasks: TaskRegistry = {
      'delivery.attempt': async (payload) => {
        if (payload.deliveryId !== deliveryId) return;
        const n = runs.length;
        runs.push(n);
        started[n]!.open();
        await resume[n]!.opened;
        if (n === 1) throw new Error('endpoint answered 503');
      },
    };
    const onComplete = (r: JobRunner) =>
      r.events.on('job:complete', ({ job }) => {
        if (job.key === key) finished[job.attempts - 1]!.open();
      });
    // Two slots when the second run is to come from the same pool.
    const a = await runner(tasks, samePool ? 2 : 1);
    onComplete(a);
    await withTx(db.pool, (tx) =>
      enqueue(tx, 'delivery.attempt', { deliveryId, trigger: 'scheduled' }, { jobKey: key }),
    );
    await started[0]!.opened;

    await unlockPools(db.pool, [a.poolId!]);
    const b = samePool ? a : await runner(tasks);
    if (!samePool) onComplete(b);
    await started[1]!.opened;
    const [taken] = await jobRows(key);
    expect(taken?.locked_by).toBe(b.poolId);

    // The first run wakes and finishes: the job is the second run's now, and stays.
    // (Within one pool the hold names the pool, not the worker: the first run's
    // outcome, written as a failure so that it deletes nothing, frees the job for
    // one run more. Nothing is lost.)
    resume[0]!.open();
    await finished[0]!.opened;
    // graphile-worker writes the recorded failure just after it says the run is complete.
    if (samePool) await eventually(async () => (await jobRows(key))[0]?.locked_by === null);
    else await new Promise((r) => setTimeout(r, 300));
    expect(await jobRows(key)).toMatchObject([{ id: taken!.id, locked_by: samePool ? null : b.poolId }]);

    // The second run fails: the job waits for its retry, as any failed run's does.
    resume[1]!.open();
    await finished[1]!.opened;
    const retried = await eventually(async () => {
      const [row] = await jobRows(key);
      return row && row.locked_by === null ? row : undefined;
    });
    expect(retried.id).toBe(taken!.id);
    expect(runs).toEqual([0, 1]);
  });
});
