// SQL for webhook_recoveries: a customer's "re-send what failed since then" for
// one endpoint, worked through oldest first by its job, which keeps its place
// (the last delivery it re-sent) so a re-run starts where the last one stopped.
// At most one runs per endpoint (a unique index on the running ones).
//
//   running ──nothing left──▶ completed
//      └────an attempt failed / endpoint disabled──▶ stopped

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import type { DeliveryStatus } from './deliveries.sql.js';

export const RECOVERY_STATUSES = ['running', 'completed', 'stopped'] as const;
export type RecoveryStatus = (typeof RECOVERY_STATUSES)[number];

/** The deliveries a recovery re-sends: those that did not get through. */
export const RECOVERABLE: readonly DeliveryStatus[] = ['failed', 'skipped'];

export interface RecoveryRow {
  id: string;
  account_id: string;
  endpoint_id: string;
  since: Date;
  status: RecoveryStatus;
  cursor_occurred_at: Date | null;
  cursor_delivery_id: string | null;
  resent: number;
  stopped_reason: string | null;
  created_at: Date;
  finished_at: Date | null;
}
const RECOVERY_COLUMNS = `id, account_id, endpoint_id, since, status, cursor_occurred_at, cursor_delivery_id, resent,
  stopped_reason, created_at, finished_at`;

/** The column list the row above is typed from, held to the table by a test. */
export const RECOVERY_TABLE_COLUMNS = { webhook_recoveries: RECOVERY_COLUMNS };

/** Starts a recovery; null when one is already running for the endpoint. */
export async function recoveryInsert(
  tx: Tx,
  r: { accountId: string; endpointId: string; since: Date },
): Promise<RecoveryRow | null> {
  const { rows } = await tx.query<RecoveryRow>({
    name: 'recovery_insert',
    text: `INSERT INTO webhook_recoveries (account_id, endpoint_id, since) VALUES ($1, $2, $3)
           ON CONFLICT (endpoint_id) WHERE status = 'running' DO NOTHING
           RETURNING ${RECOVERY_COLUMNS}`,
    values: [r.accountId, r.endpointId, r.since],
  });
  return rows[0] ?? null;
}

export async function recoveryById(db: Db, id: string): Promise<RecoveryRow | null> {
  const { rows } = await db.query<RecoveryRow>({
    name: 'recovery_by_id',
    text: `SELECT ${RECOVERY_COLUMNS} FROM webhook_recoveries WHERE id = $1`,
    values: [id],
  });
  return rows[0] ?? null;
}

export async function recoveryListOfEndpoint(db: Db, endpointId: string, limit: number): Promise<RecoveryRow[]> {
  const { rows } = await db.query<RecoveryRow>({
    name: 'recovery_list_of_endpoint',
    text: `SELECT ${RECOVERY_COLUMNS} FROM webhook_recoveries WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2`,
    values: [endpointId, limit],
  });
  return rows;
}

/** Recoveries the account asked for since `since` (the request budget). */
export async function recoveriesAskedSince(db: Db, accountId: string, since: Date): Promise<number> {
  const { rows } = await db.query<{ n: number }>({
    name: 'recoveries_asked_since',
    text: 'SELECT count(*)::int AS n FROM webhook_recoveries WHERE account_id = $1 AND created_at > $2',
    values: [accountId, since],
  });
  return rows[0]!.n;
}

/** The next delivery the recovery re-sends: oldest event first, after its place, of the events since `since`. */
export async function recoveryNextDelivery(db: Db, r: RecoveryRow): Promise<{ id: string; occurred_at: Date } | null> {
  const { rows } = await db.query<{ id: string; occurred_at: Date }>({
    name: 'recovery_next_delivery',
    text: `SELECT d.id, ev.occurred_at
             FROM webhook_deliveries d JOIN outbound_events ev ON ev.id = d.event_id
            WHERE d.endpoint_id = $1 AND d.status = ANY ($2::text[]) AND ev.occurred_at >= $3
              AND ($4::timestamptz IS NULL OR (ev.occurred_at, d.id) > ($4, $5))
            ORDER BY ev.occurred_at, d.id
            LIMIT 1`,
    values: [r.endpoint_id, RECOVERABLE, r.since, r.cursor_occurred_at, r.cursor_delivery_id],
  });
  return rows[0] ?? null;
}

/** Moves the recovery's place past a delivery it re-sent; false when it no longer runs. */
export async function recoveryAdvance(
  tx: Tx,
  id: string,
  past: { occurredAt: Date; deliveryId: string },
): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'recovery_advance',
    text: `UPDATE webhook_recoveries SET cursor_occurred_at = $2, cursor_delivery_id = $3, resent = resent + 1
            WHERE id = $1 AND status = 'running'`,
    values: [id, past.occurredAt, past.deliveryId],
  });
  return rowCount === 1;
}

/** running → completed | stopped, once. */
export async function recoveryFinish(
  db: Db,
  id: string,
  status: Exclude<RecoveryStatus, 'running'>,
  reason: string | null,
  at: Date,
): Promise<RecoveryRow | null> {
  const { rows } = await db.query<RecoveryRow>({
    name: 'recovery_finish',
    text: `UPDATE webhook_recoveries SET status = $2, stopped_reason = $3, finished_at = $4
            WHERE id = $1 AND status = 'running'
            RETURNING ${RECOVERY_COLUMNS}`,
    values: [id, status, reason, at],
  });
  return rows[0] ?? null;
}
