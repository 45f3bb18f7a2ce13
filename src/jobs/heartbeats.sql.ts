// SQL for crash recovery of graphile-worker (worker_heartbeats). A SIGKILLed worker leaves its jobs locked
// for four hours; here every worker process writes a heartbeat for its pool every
// few seconds, and any worker process unlocks the jobs (and named queues) of pools
// whose heartbeat is older than the bound, with graphile_worker.force_unlock_workers().
// A crashed job then re-runs within about the bound. Owns worker_heartbeats.

import { hostname } from 'node:os';
import type pg from 'pg';

export async function heartbeat(db: pg.Pool, poolId: string): Promise<void> {
  await db.query({
    name: 'worker_heartbeat',
    text: `INSERT INTO worker_heartbeats (pool_id, hostname, pid) VALUES ($1, $2, $3)
           ON CONFLICT (pool_id) DO UPDATE SET seen_at = now()`,
    values: [poolId, hostname(), process.pid],
  });
}

export async function forgetHeartbeat(db: pg.Pool, poolId: string): Promise<void> {
  await db.query({
    name: 'worker_heartbeat_forget',
    text: 'DELETE FROM worker_heartbeats WHERE pool_id = $1',
    values: [poolId],
  });
}

/**
 * Unlocks the jobs of every pool that has been silent for longer than staleAfterMs:
 * pools whose heartbeat is stale, and lock holders with no heartbeat at all (a
 * process killed before its first beat). Returns the pool ids it unlocked.
 */
export async function sweepStaleWorkers(
  db: pg.Pool,
  staleAfterMs: number,
  ownPoolId: string | null = null,
): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>({
    name: 'worker_sweep_find',
    text: `WITH bound AS (SELECT now() - make_interval(secs => $1::double precision / 1000) AS t)
           SELECT pool_id AS id FROM worker_heartbeats, bound WHERE seen_at < bound.t
           UNION
           SELECT j.locked_by FROM graphile_worker.jobs j, bound
            WHERE j.locked_by IS NOT NULL AND j.locked_at < bound.t
              AND NOT EXISTS (SELECT 1 FROM worker_heartbeats h
                               WHERE h.pool_id = j.locked_by AND h.seen_at >= bound.t)`,
    values: [staleAfterMs],
  });
  const ids = rows.map((r) => r.id).filter((id) => id !== ownPoolId);
  if (ids.length > 0) await unlockPools(db, ids);
  return ids;
}

/**
 * Completes a job only if its pool still holds it from the same fetch: deletes it
 * and frees its named queue, in one statement. graphile-worker's own completion
 * deletes by id alone, so a worker that was swept while it ran (paused past the
 * bound) would delete whatever the job had become meanwhile: another worker's run
 * of it, or the next run its own task had just scheduled under the job's key (an
 * add that finds the job unlocked rewrites that row in place). The fetch is told
 * by `locked_at`, to the millisecond a Date keeps (a worker of the same pool that
 * took the job again after a sweep locked it anew), not by `attempts`: an add
 * under the key of a running job sets that job's attempts to its maximum. False
 * when the hold was lost: the job is left to whoever has it now.
 */
export async function completeHeldJob(
  db: pg.Pool,
  job: { id: string; locked_by: string | null; locked_at: Date | null },
): Promise<boolean> {
  const { rows } = await db.query<{ n: number }>({
    name: 'worker_job_complete_held',
    text: `WITH done AS (
             DELETE FROM graphile_worker._private_jobs
              WHERE id = $1 AND locked_by = $2
                AND locked_at > $3::timestamptz - interval '1 ms' AND locked_at < $3::timestamptz + interval '1 ms'
             RETURNING job_queue_id
           ), queue AS (
             UPDATE graphile_worker._private_job_queues SET locked_at = NULL, locked_by = NULL
              WHERE locked_by = $2 AND id IN (SELECT job_queue_id FROM done)
           )
           SELECT count(*)::int AS n FROM done`,
    values: [job.id, job.locked_by, job.locked_at],
  });
  return rows[0]!.n === 1;
}

/** Frees every job and named queue the given pools hold, and forgets their heartbeats. */
export async function unlockPools(db: pg.Pool, poolIds: string[]): Promise<void> {
  await db.query({
    name: 'worker_pools_unlock',
    text: 'SELECT graphile_worker.force_unlock_workers($1::text[])',
    values: [poolIds],
  });
  await db.query({
    name: 'worker_heartbeats_forget',
    text: 'DELETE FROM worker_heartbeats WHERE pool_id = ANY ($1::text[])',
    values: [poolIds],
  });
}

/**
 * Frees the jobs (and their named queues) that a live pool holds in the database
 * but not in fact: locked by `poolId` for longer than `olderThanMs`, and none of
 * `heldIds`, the jobs the pool has taken and not yet let go. After a failover to
 * a standby that had not yet received the pool's last completions, the new primary
 * shows jobs locked by a pool that has finished them and lives on, heartbeating:
 * no sweep of silent pools frees them, and graphile-worker's own only after 4 hours.
 * Returns how many it freed.
 */
export async function unlockForgottenJobs(
  db: pg.Pool,
  poolId: string,
  heldIds: readonly string[],
  olderThanMs: number,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>({
    name: 'worker_forgotten_unlock',
    text: `WITH forgotten AS (
             UPDATE graphile_worker._private_jobs SET locked_at = NULL, locked_by = NULL
              WHERE locked_by = $1 AND NOT (id = ANY ($2::bigint[]))
                AND locked_at < now() - make_interval(secs => $3::double precision / 1000)
             RETURNING job_queue_id
           ), queues AS (
             UPDATE graphile_worker._private_job_queues SET locked_at = NULL, locked_by = NULL
              WHERE locked_by = $1 AND id IN (SELECT job_queue_id FROM forgotten)
           )
           SELECT count(*)::int AS n FROM forgotten`,
    values: [poolId, heldIds, olderThanMs],
  });
  return rows[0]!.n;
}
