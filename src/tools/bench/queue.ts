// The job queue's own floor, measured in this run: graphile-worker (the same
// version, settings and concurrency as the worker role) running a task that does
// nothing. Its wake-up latency (enqueue → task start, LISTEN/NOTIFY) bounds the
// pipeline's latency from below, and its burn-down rate bounds the pipeline
// (two jobs per message) and delivery (one job per event) throughput from above.

import { Logger, run, type Runner } from 'graphile-worker';
import { createPool } from '../../db/pool.js';
import { summarize, type LatencySummary } from './stats.js';

export interface QueueFloor {
  concurrency: number;
  /** add_job sent → no-op task started, ms, one job at a time at `pickupRate`/s. */
  pickup: LatencySummary;
  pickupRate: number;
  /** No-op jobs completed per second, from the commit of `burnJobs` jobs until the last one ran. */
  burnDown: number;
  burnJobs: number;
}

const silent = new Logger(() => () => undefined);

export async function measureQueueFloor(opts: {
  databaseUrl: string;
  concurrency: number;
  pickupSeconds: number;
  pickupRate: number;
  burnJobs: number;
}): Promise<QueueFloor> {
  const pool = createPool(opts.databaseUrl, { max: opts.concurrency * 2 + 4, applicationName: 'handset-bench-queue' });
  const producer = createPool(opts.databaseUrl, { max: 2, applicationName: 'handset-bench-producer' });
  const sentAt = new Map<number, number>();
  const pickup: number[] = [];
  let ran = 0;
  let onRan: (() => void) | null = null;
  let runner: Runner | undefined;
  try {
    runner = await run({
      pgPool: pool,
      concurrency: opts.concurrency,
      pollInterval: 1000,
      noHandleSignals: true,
      logger: silent,
      taskList: {
        'bench.noop': async (payload) => {
          const k = (payload as { k?: number }).k;
          if (typeof k === 'number' && sentAt.has(k)) pickup.push(performance.now() - sentAt.get(k)!);
          ran++;
          onRan?.();
        },
      },
    });
    await producer.query(`SELECT 1`);

    // Wake-up latency: one job at a time, well below capacity.
    const count = Math.max(20, Math.round(opts.pickupSeconds * opts.pickupRate));
    for (let k = 0; k < count; k++) {
      sentAt.set(k, performance.now());
      await producer.query(`SELECT graphile_worker.add_job('bench.noop', json_build_object('k', $1::int))`, [k]);
      await new Promise((r) => setTimeout(r, 1000 / opts.pickupRate));
    }
    await until(() => ran >= count, 10_000);

    // Burn-down: many jobs committed at once.
    ran = 0;
    const done = new Promise<void>((resolve) => {
      onRan = () => ran >= opts.burnJobs && resolve();
    });
    await producer.query(
      `SELECT count(*) FROM graphile_worker.add_jobs(
         (SELECT array_agg(ROW('bench.noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec)
            FROM generate_series(1, $1::int)))`,
      [opts.burnJobs],
    );
    const committed = performance.now();
    await done;
    const burnSeconds = (performance.now() - committed) / 1000;
    return {
      concurrency: opts.concurrency,
      pickup: summarize(pickup),
      pickupRate: opts.pickupRate,
      burnDown: opts.burnJobs / burnSeconds,
      burnJobs: opts.burnJobs,
    };
  } finally {
    await runner?.stop();
    await pool.end();
    await producer.end();
  }
}

async function until(fn: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error('the queue did not drain in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
