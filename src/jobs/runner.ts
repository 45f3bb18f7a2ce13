// The worker role's job runner: graphile-worker (LISTEN/NOTIFY wake-ups, polling
// as a backstop for future run_at), our typed task registry, per-task metrics, and
// the heartbeat + sweeper that recover jobs from crashed workers (jobs/recovery.ts).

import { EventEmitter } from 'node:events';
import { run, type Runner, type Task, type WorkerEvents } from 'graphile-worker';
import type pg from 'pg';
import { workerLogger, type Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { TaskName } from './enqueue.js';
import { forgetHeartbeat, heartbeat, sweepStaleWorkers } from './recovery.js';

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
  events.on('pool:create', ({ workerPool }) => {
    poolId = workerPool.id;
    beat();
    beating = setInterval(beat, recoveryTimings(opts.staleAfterMs).heartbeatEveryMs);
    beating.unref();
  });

  const sweeping = setInterval(
    () => {
      if (healthySince === null || Date.now() - healthySince < opts.staleAfterMs) return;
      sweepStaleWorkers(pool, opts.staleAfterMs, poolId)
        .then((ids) => ids.length > 0 && log.warn({ pools: ids }, 'unlocked jobs of silent workers'))
        .catch((err: Error) => log.warn({ err: err.message }, 'worker sweep failed'));
    },
    recoveryTimings(opts.staleAfterMs).sweepEveryMs,
  );
  sweeping.unref();

  const taskList: Record<string, Task> = {};
  for (const [name, handler] of Object.entries(opts.tasks) as [TaskName, TaskHandler<TaskName>][]) {
    taskList[name] = async (payload, helpers) => {
      const end = metrics.jobDuration.startTimer({ task: name });
      try {
        await handler(payload as GraphileWorker.Tasks[TaskName], {
          jobId: helpers.job.id,
          attempts: helpers.job.attempts,
          maxAttempts: helpers.job.max_attempts,
          inSerialQueue: helpers.job.job_queue_id !== null,
          abortSignal: helpers.abortSignal,
        });
        metrics.jobs.inc({ task: name, outcome: 'completed' });
      } catch (err) {
        metrics.jobs.inc({ task: name, outcome: 'failed' });
        log.warn(
          { task: name, jobId: helpers.job.id, attempt: helpers.job.attempts, err: (err as Error).message },
          'job failed; it will be retried with backoff',
        );
        throw err;
      } finally {
        end();
      }
    };
  }

  let runner: Runner;
  let stopped: Promise<void> | undefined;
  try {
    runner = await run({
      pgPool: pool,
      concurrency: opts.concurrency,
      pollInterval: opts.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS,
      noHandleSignals: true,
      taskList,
      logger: workerLogger(log),
      events,
      crontab: opts.crontab ?? '',
      preset: { worker: { gracefulShutdownAbortTimeout: 10_000 } },
    });
  } catch (err) {
    clearInterval(sweeping);
    throw err;
  }

  return {
    get poolId() {
      return poolId;
    },
    events,
    async stop() {
      if (stopped) return stopped;
      stopped = (async () => {
        clearInterval(sweeping);
        await runner.stop();
        if (beating) clearInterval(beating);
        if (poolId) await forgetHeartbeat(pool, poolId).catch(() => undefined);
      })();
      return stopped;
    },
  };
}
