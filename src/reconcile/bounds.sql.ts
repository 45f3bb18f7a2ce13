// SQL for reconcile_bounds: the bounds reconciliation runs with, as the workers
// recorded them (one row per setting, first and last in force), so that
// `handset audit` judges "nothing waits forever" with the bounds of the servers
// that wrote the database rather than its own configuration. A worker records
// its bounds when it starts and whenever it runs a pass. Owns reconcile_bounds.

import type { Db } from '../db/pool.js';

/** Reconciliation's settings, in ms. */
export interface ReconcileBounds {
  intervalMs: number;
  afterMs: number;
  messageAfterMs: number;
}

/** A setting as recorded: when a worker first had it, and when one last had it in force. */
export interface RecordedBounds extends ReconcileBounds {
  firstSeenAt: Date;
  lastSeenAt: Date;
}

const BOUNDS_COLUMNS = 'interval_ms, after_ms, message_after_ms, first_seen_at, last_seen_at';

/** The column list the rows below are read from, held to the table by a test. */
export const BOUNDS_TABLE_COLUMNS = { reconcile_bounds: BOUNDS_COLUMNS };

/** These bounds are in force at `at`: a new setting's row, or a later last_seen_at for a known one. */
export async function boundsRecord(db: Db, b: ReconcileBounds, at: Date): Promise<void> {
  await db.query({
    name: 'reconcile_bounds_record',
    text: `INSERT INTO reconcile_bounds (${BOUNDS_COLUMNS}) VALUES ($1, $2, $3, $4, $4)
           ON CONFLICT (interval_ms, after_ms, message_after_ms)
           DO UPDATE SET last_seen_at = greatest(reconcile_bounds.last_seen_at, EXCLUDED.last_seen_at)`,
    values: [b.intervalMs, b.afterMs, b.messageAfterMs, at],
  });
}

/**
 * Every recorded setting, the one last in force first; none from a database
 * whose servers predate the record (the table is missing: the audit only reads).
 */
export async function boundsRecorded(db: Db): Promise<RecordedBounds[]> {
  const { rows: present } = await db.query<{ t: string | null }>({
    name: 'reconcile_bounds_present',
    text: `SELECT to_regclass('reconcile_bounds')::text AS t`,
  });
  if (!present[0]?.t) return [];
  const { rows } = await db.query<RecordedBounds>({
    name: 'reconcile_bounds_recorded',
    text: `SELECT interval_ms::float8 AS "intervalMs", after_ms::float8 AS "afterMs",
                  message_after_ms::float8 AS "messageAfterMs", first_seen_at AS "firstSeenAt", last_seen_at AS "lastSeenAt"
             FROM reconcile_bounds ORDER BY last_seen_at DESC, interval_ms, after_ms, message_after_ms`,
  });
  return rows;
}
