// Enqueues a job on the caller's transaction with graphile_worker.add_job(), so
// the job commits or rolls back with the state change that asked for it. Task
// names are stable strings ("message.dispatch"); payloads are declared next to
// their task in the owning module via GraphileWorker.Tasks declaration merging.

import type { Tx } from '../db/tx.js';

export type TaskName = keyof GraphileWorker.Tasks & string;

export interface JobOptions {
  runAt?: Date;
  maxAttempts?: number;
  /** A second add_job with the same key replaces the waiting job instead of adding one. */
  jobKey?: string;
  /** 'replace' (the default) also moves the waiting job's run_at; 'preserve_run_at' keeps it. */
  jobKeyMode?: 'replace' | 'preserve_run_at';
  /** Jobs in one named queue run one at a time. */
  queueName?: string;
  priority?: number;
}

export async function enqueue<K extends TaskName>(
  tx: Tx,
  task: K,
  payload: GraphileWorker.Tasks[K],
  opts: JobOptions = {},
): Promise<void> {
  await tx.query({
    name: 'jobs_enqueue',
    text: `SELECT FROM graphile_worker.add_job($1::text, $2::json,
             queue_name => $3::text, run_at => $4::timestamptz, max_attempts => $5::int,
             job_key => $6::text, priority => $7::int, job_key_mode => $8::text)`,
    values: [
      task,
      JSON.stringify(payload),
      opts.queueName ?? null,
      opts.runAt ?? null,
      opts.maxAttempts ?? null,
      opts.jobKey ?? null,
      opts.priority ?? null,
      opts.jobKeyMode ?? null,
    ],
  });
}
