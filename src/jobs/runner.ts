// The worker role's job runner: graphile-worker (LISTEN/NOTIFY wake-ups, polling
// as a backstop for future run_at), our typed task registry, per-task metrics, the
// heartbeat + sweeper that recover jobs from crashed workers (jobs/recovery.ts),
// and a supervisor that outlives database failures.
//
// Why a supervisor: when graphile-worker cannot write a job's completion or
// failure (the database connection broke at that moment), it considers its pool
// inconsistent and shuts the pool down; the jobs it could not record stay locked by
// that pool, whose process is alive and heartbeating, so the sweeper would never
// free them. We let it shut down, wait until the database answers again, unlock
// the dead pool's jobs ourselves and start a new pool: those jobs run again at once,
// and the guards in every handler make a re-run after a committed effect a no-op.
// That shutdown can itself never finish: two batches it could not write in one
// outage leave its count of batches in flight below zero, and it waits for that
// count to reach zero (0.17.3 and 0.18.0 alike). So the supervisor waits for the
// shutdown only until all the pool's workers have left and none of its jobs has
// run for a moment, then gives the pool up.
//
// A failover to a standby that lags can also leave the opposite: the new primary
// shows jobs locked by a pool that finished them (its completions were lost with
// the old primary) and lives on. Each sweep, a pool frees what the database says
// it holds beyond the jobs it has in hand; the guards make the second run a no-op.
//
// A pool that was only paused past the bound (a frozen VM) wakes inside jobs the
// sweep freed. graphile-worker completes a job by id alone, which would delete what
// the job became meanwhile (another worker's run, the next run its own task just
// scheduled under its key), so a run is completed here, guarded (completeHeldJob).

import { EventEmitter } from 'node:events';
import { setInterval as every, setTimeout as sleep } from 'node:timers/promises';
import { run, type Runner, type Task, type WorkerEvents, type WorkerPool } from 'graphile-worker';
import type pg from 'pg';
import type { Logger } from '../telemetry/log.js';
import { workerLogger } from './logger.js';
import type { JobOutcome, Metrics } from '../telemetry/metrics.js';
import type { TaskName } from './enqueue.js';
import {
  completeHeldJob,
  forgetHeartbeat,
  heartbeat,
  sweepStaleWorkers,
  unlockForgottenJobs,
  unlockPools,
} from './heartbeats.sql.js';

export interface JobContext {
  jobId: string;
  /** 1 on the first run; graphile-worker counts a run when it fetches the job. */
  attempts: number;
  maxAttempts: number;
  /** Whether the job runs in a named (serial) queue. */
  inSerialQueue: boolean;
  /** Fires when the worker is shutting down and in-flight work should wrap up. */
  abortSignal: AbortSignal | undefined;
}

export type TaskHandler<K extends TaskName> = (payload: GraphileWorker.Tasks[K], job: JobContext) => Promise<void>;
export type TaskRegistry = { [K in TaskName]?: TaskHandler<K> };

export interface JobRunnerOptions {
  pool: pg.Pool;
  log: Logger;
  metrics: Metrics;
  tasks: TaskRegistry;
  concurrency: number;
  /** A pool silent for longer than this has its jobs unlocked by the sweeper. */
  staleAfterMs: number;
  /** Newly added jobs arrive by NOTIFY; this only bounds how late a future run_at fires. */
  pollIntervalMs?: number;
  crontab?: string;
}

export interface JobRunner {
  /** Stops taking jobs and waits for the running ones to finish. */
  stop(): Promise<void>;
  /** The graphile-worker pool id that appears in jobs.locked_by while this runner holds a job. */
  readonly poolId: string | null;
  readonly events: WorkerEvents;
}

const DEFAULT_POLL_INTERVAL_MS = 1000;
/**
 * How long a pool shutting down after a fatal error may take once none of our jobs
 * is running in it. Writing the last outcomes takes milliseconds; past this its
 * shutdown is stuck and the pool is given up.
 */
const SHUTDOWN_GRACE_MS = 2000;
const QUIET_CHECK_MS = 250;
/**
 * graphile-worker asks for a worker's next job before that worker's completion is
 * written, and only an insert sends a NOTIFY: the next job of a named queue, its
 * queue still locked by the job just finished, would wait for the next poll — a
 * lane drained at one job a second. After a job of a named queue ends, the pool is
 * nudged as its completion lands (a nudge wakes one idle worker; no database).
 */
const SERIAL_NUDGES_MS = [2, 10, 50, 200] as const;

/**
 * How often a worker beats and sweeps for a given stale bound, and the latest a
 * job of a worker that died runs again, counted from its death: silent for the
 * bound (its last beat came before), noticed at the next sweep, found at the next poll.
 */
export function recoveryTimings(staleAfterMs: number) {
  const heartbeatEveryMs = Math.max(200, Math.min(10_000, staleAfterMs / 4));
  const sweepEveryMs = Math.max(250, Math.min(30_000, staleAfterMs / 3));
  return { heartbeatEveryMs, sweepEveryMs, rerunWithinMs: staleAfterMs + sweepEveryMs + DEFAULT_POLL_INTERVAL_MS };
}

export async function startJobRunner(opts: JobRunnerOptions): Promise<JobRunner> {
  const { pool, log, metrics } = opts;
  const events: WorkerEvents = new EventEmitter() as WorkerEvents;
  let poolId: string | null = null;
  let beating: NodeJS.Timeout | undefined;
  // Since when our own heartbeats have been landing. After a database outage every
  // pool's heartbeat is stale at once; a sweeper judges the others only once it has
  // itself been healthy for a whole bound, so live workers get the time to beat again.
  let healthySince: number | null = null;

  const beat = () => {
    if (!poolId) return;
    heartbeat(pool, poolId).then(
      () => {
        healthySince ??= Date.now();
      },
      (err: Error) => {
        healthySince = null;
        log.warn({ err: err.message }, 'worker heartbeat failed');
      },
    );
  };
  let workers: WorkerPool | null = null;
  // Jobs inside a handler now, since when none has been, and when the current pool
  // hit an error that shuts it down: what tells a stuck shutdown from a slow one.
  let running = 0;
  let idleSince = Date.now();
  let fatalAt: number | null = null;
  /**
   * The pool hit such an error, every one of its workers has left, and none of our
   * jobs has run for the grace since: its shutdown is stuck, and nothing of it can
   * still take or run a job.
   */
  const stuck = () =>
    fatalAt !== null &&
    running === 0 &&
    workers?._workers.length === 0 &&
    Date.now() - Math.max(idleSince, fatalAt) >= SHUTDOWN_GRACE_MS;
  // Only the current pool's: a pool given up earlier may still report one late.
  const onFatal = (from: WorkerPool) => {
    if (from === workers) fatalAt ??= Date.now();
  };
  events.on('pool:fatalError', ({ workerPool }) => onFatal(workerPool));
  events.on('worker:fatalError', ({ worker }) => onFatal(worker.workerPool));

  const nudge = () => {
    try {
      if (workers && !workers._shuttingDown) workers.nudge(1);
    } catch {
      // a pool that stopped meanwhile: its successor polls for itself
    }
  };
  events.on('job:complete', ({ job }) => {
    if (job.job_queue_id === null) return;
    for (const ms of SERIAL_NUDGES_MS) setTimeout(nudge, ms).unref();
  });
  // The jobs this runner's pools have taken and not let go, by id; a job stays a
  // while after it ended, while graphile-worker writes its outcome.
  // Job id → when it ended (null while it runs); the sweep forgets those ended a bound ago.
  const inHand = new Map<string, number | null>();
  events.on('job:start', ({ job }) => inHand.set(job.id, null));
  events.on('job:complete', ({ job }) => inHand.set(job.id, Date.now()));

  events.on('pool:create', ({ workerPool }) => {
    workers = workerPool;
    fatalAt = null;
    poolId = workerPool.id;
    beat();
    clearInterval(beating);
    beating = setInterval(beat, recoveryTimings(opts.staleAfterMs).heartbeatEveryMs);
    beating.unref();
  });

  const sweeping = setInterval(() => {
    for (const [id, ended] of inHand) if (ended !== null && Date.now() - ended > opts.staleAfterMs) inHand.delete(id);
    if (poolId && healthySince !== null) {
      const own = poolId;
      unlockForgottenJobs(pool, own, [...inHand.keys()], opts.staleAfterMs)
        .then((n) => n > 0 && log.warn({ pool: own, jobs: n }, 'unlocked jobs this worker held only in the database'))
        .catch((err: Error) => log.warn({ err: err.message }, 'worker self-check failed'));
    }
    if (healthySince === null || Date.now() - healthySince < opts.staleAfterMs) return;
    sweepStaleWorkers(pool, opts.staleAfterMs, poolId)
      .then((ids) => ids.length > 0 && log.warn({ pools: ids }, 'unlocked jobs of silent workers'))
      .catch((err: Error) => log.warn({ err: err.message }, 'worker sweep failed'));
  }, recoveryTimings(opts.staleAfterMs).sweepEveryMs);
  sweeping.unref();

  const taskList: Record<string, Task> = {};
  for (const [name, handler] of Object.entries(opts.tasks) as [TaskName, TaskHandler<TaskName>][]) {
    taskList[name] = async (payload, helpers) => {
      const end = metrics.jobDuration.startTimer({ task: name });
      let outcome: JobOutcome = 'failed';
      running++;
      try {
        await handler(payload as GraphileWorker.Tasks[TaskName], {
          jobId: helpers.job.id,
          attempts: helpers.job.attempts,
          maxAttempts: helpers.job.max_attempts,
          inSerialQueue: helpers.job.job_queue_id !== null,
          abortSignal: helpers.abortSignal,
        });
        // Completed here, guarded, before graphile-worker's own completion (by id
        // alone) runs and finds nothing: see completeHeldJob.
        outcome = (await completeHeldJob(pool, helpers.job)) ? 'completed' : 'lock_lost';
      } catch (err) {
        log.warn(
          { task: name, jobId: helpers.job.id, attempt: helpers.job.attempts, err: (err as Error).message },
          'job failed; it will be retried with backoff',
        );
        throw err;
      } finally {
        metrics.jobs.inc({ task: name, outcome });
        end();
        if (--running === 0) idleSince = Date.now();
      }
      if (outcome === 'lock_lost') {
        // Thrown so that graphile-worker writes a failure, which it writes only
        // while its pool holds the job: nothing, unless a worker of this same pool
        // took the job again, whose run is then freed for one run more. Nothing is lost.
        log.warn(
          { task: name, jobId: helpers.job.id },
          'this worker was silent past the stale bound while it ran this job, and its hold was freed; the job is left as it is now',
        );
        throw new Error('the hold on this job was freed while it ran; left to whoever holds it now');
      }
    };
  }

  const start = () =>
    run({
      pgPool: pool,
      concurrency: opts.concurrency,
      pollInterval: opts.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS,
      noHandleSignals: true,
      taskList,
      logger: workerLogger(log),
      events,
      crontab: opts.crontab ?? '',
      preset: {
        worker: {
          gracefulShutdownAbortTimeout: 10_000,
          // Batched (even with no delay), a completion or failure that cannot be
          // written is handed to graphile-worker's error handler, which shuts the
          // pool down for the supervisor to replace. Unbatched, the same failure is
          // a promise rejection nobody handles, and the process dies.
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        },
      },
    });

  let current: Runner;
  try {
    current = await start();
  } catch (err) {
    clearInterval(sweeping);
    throw err;
  }

  let stopping = false;
  const supervised = (async () => {
    for (;;) {
      const ended = await settledOrGivenUp(
        current.promise.catch((err: Error) => {
          if (!stopping) log.warn({ err: err.message }, 'the job runner stopped after an error');
        }),
        stuck,
      );
      if (!ended) {
        log.warn({ pool: poolId }, 'the job runner did not finish shutting down after an error; giving it up');
        // What its stop releases besides the pool (the cron schedule); the pool's own shutdown stays stuck.
        current.stop().catch(() => undefined);
      }
      const dead = poolId;
      poolId = null;
      clearInterval(beating);
      if (stopping) return;
      metrics.runnerRestarts.inc();
      log.warn({ pool: dead }, 'job runner stopped on its own; restarting it once the database answers');
      const next = await restart(dead);
      if (!next) return;
      current = next;
    }
  })();

  /** Waits for the database, frees the dead pool's jobs, starts a new pool; null when stopped meanwhile. */
  async function restart(dead: string | null): Promise<Runner | null> {
    for (let attempt = 0; !stopping; attempt++) {
      try {
        await pool.query('SELECT 1');
        if (dead) {
          await unlockPools(pool, [dead]);
          log.warn({ pool: dead }, 'unlocked the jobs the stopped job runner could not record');
        }
        const runner = await start();
        if (stopping) {
          // stop() came while this one started: it waits on the old runner, so this one stops here.
          await runner.stop().catch(() => undefined);
          return null;
        }
        log.info('job runner restarted');
        return runner;
      } catch (err) {
        log.warn({ err: (err as Error).message, attempt }, 'job runner cannot restart yet');
        await sleep(Math.min(250 * 2 ** attempt, 5_000));
      }
    }
    return null;
  }

  return {
    get poolId() {
      return poolId;
    },
    events,
    stop() {
      stopping = true;
      return (async () => {
        clearInterval(sweeping);
        const last = poolId;
        // It may have stopped itself already, or be stuck shutting down (see the top).
        await settledOrGivenUp(
          current.stop().catch(() => undefined),
          stuck,
        );
        await supervised;
        clearInterval(beating);
        if (last) await forgetHeartbeat(pool, last).catch(() => undefined);
      })();
    },
  };
}

/**
 * Waits for `promise`, or until `givenUp()` holds (checked a few times a second),
 * whichever comes first: true when the promise settled.
 */
async function settledOrGivenUp(promise: Promise<unknown>, givenUp: () => boolean): Promise<boolean> {
  const checking = new AbortController();
  const gaveUp = (async () => {
    for await (const _ of every(QUIET_CHECK_MS, undefined, { signal: checking.signal })) if (givenUp()) break;
    return false;
  })().catch(() => false);
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      gaveUp,
    ]);
  } finally {
    checking.abort();
  }
}
