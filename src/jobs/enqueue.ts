// Enqueues jobs on the caller's transaction with graphile_worker.add_job(s), so a
// job commits or rolls back with the state change that asked for it. Task names,
// payloads, keys and lanes are declared in keys.ts; the payload is built here, in
// TypeScript, where the compiler checks it against its task.

import type { Tx } from '../db/tx.js';
import type { TaskName } from './keys.js';

export type { TaskName } from './keys.js';

/** The largest job priority: graphile-worker keeps it in a smallint. Lower runs first. */
export const MAX_PRIORITY = 32_767;

export interface JobOptions {
  runAt?: Date;
  maxAttempts?: number;
  /** A second add_job with the same key replaces the waiting job instead of adding one. */
  jobKey?: string;
  /** 'replace' (the default) also moves the waiting job's run_at; 'preserve_run_at' keeps it. */
  jobKeyMode?: 'replace' | 'preserve_run_at';
  /** Jobs in one named queue run one at a time. */
  queueName?: string | null;
  /** 0 (the default) to MAX_PRIORITY; among due jobs, a lower one is taken first. */
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

export interface JobSpec<K extends TaskName> {
  payload: GraphileWorker.Tasks[K];
  opts?: Pick<JobOptions, 'jobKey' | 'queueName' | 'runAt' | 'priority'>;
}

/** Many jobs of one task in one statement (one NOTIFY); nothing is sent for none. */
export async function enqueueMany<K extends TaskName>(tx: Tx, task: K, jobs: readonly JobSpec<K>[]): Promise<void> {
  if (jobs.length === 0) return;
  await tx.query({
    name: 'jobs_enqueue_many',
    text: `SELECT FROM graphile_worker.add_jobs(
             (SELECT array_agg(ROW($1::text, p::json, q, r, NULL, k, n, NULL)::graphile_worker.job_spec)
                FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::int[]) AS j (p, q, r, k, n)))`,
    values: [
      task,
      jobs.map((j) => JSON.stringify(j.payload)),
      jobs.map((j) => j.opts?.queueName ?? null),
      jobs.map((j) => j.opts?.runAt ?? null),
      jobs.map((j) => j.opts?.jobKey ?? null),
      jobs.map((j) => j.opts?.priority ?? null),
    ],
  });
}

/** Removes the waiting job with this key, if any (a running one finishes). */
export async function removeJob(tx: Tx, jobKey: string): Promise<void> {
  await tx.query({ name: 'jobs_remove', text: 'SELECT FROM graphile_worker.remove_job($1)', values: [jobKey] });
}
