// SQL for webhook_endpoints: a customer's receiving URLs, their secrets, and the
// health counter that disables an endpoint after repeated failure. Every state
// change is one guarded statement that says whether it applied.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export interface EndpointRow {
  id: string;
  account_id: string;
  url: string;
  description: string | null;
  event_types: string[];
  secret: string;
  previous_secret: string | null;
  previous_secret_expires_at: Date | null;
  enabled: boolean;
  disabled_reason: string | null;
  disabled_at: Date | null;
  consecutive_failures: number;
  created_at: Date;
  updated_at: Date;
  deleted_at: Date | null;
  /** Grows by one with each change of the endpoint (guarded statements below); customers order events by it. */
  sequence: number;
}

const ENDPOINT_COLUMNS = `id, account_id, url, description, event_types, secret, previous_secret,
  previous_secret_expires_at, enabled, disabled_reason, disabled_at, consecutive_failures, created_at, updated_at,
  deleted_at, sequence`;

/** The column list the row above is typed from, held to the table by a test. */
export const ENDPOINT_TABLE_COLUMNS = { webhook_endpoints: ENDPOINT_COLUMNS };

export const DISABLE_REASONS = ['consecutive_failures', 'gone', 'manual'] as const;
export type DisableReason = (typeof DISABLE_REASONS)[number];

export async function endpointInsert(
  tx: Tx,
  e: { accountId: string; url: string; description: string | null; eventTypes: string[]; secret: string },
): Promise<EndpointRow> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_insert',
    text: `INSERT INTO webhook_endpoints (account_id, url, description, event_types, secret)
     VALUES ($1, $2, $3, $4, $5) RETURNING ${ENDPOINT_COLUMNS}`,
    values: [e.accountId, e.url, e.description, e.eventTypes, e.secret],
  });
  return rows[0]!;
}

export async function endpointOfAccount(db: Db, accountId: string, id: string): Promise<EndpointRow | null> {
  const { rows } = await db.query<EndpointRow>({
    name: 'endpoint_of_account',
    text: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

export async function endpointList(
  db: Db,
  accountId: string,
  limit: number,
  startingAfter: string | null,
): Promise<EndpointRow[]> {
  const { rows } = await db.query<EndpointRow>({
    name: 'endpoint_list',
    text: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints
      WHERE account_id = $1 AND deleted_at IS NULL AND ($2::text IS NULL OR id < $2)
      ORDER BY id DESC LIMIT $3`,
    values: [accountId, startingAfter, limit + 1],
  });
  return rows;
}

/**
 * Changes url/description/event types, and enables or disables by hand.
 * Re-enabling resets the failure count and forgets why it was disabled.
 */
export async function endpointUpdate(
  tx: Tx,
  accountId: string,
  id: string,
  patch: {
    url?: string | undefined;
    description?: string | null | undefined;
    eventTypes?: string[] | undefined;
    enabled?: boolean | undefined;
  },
): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_update',
    text: `UPDATE webhook_endpoints SET
        url = coalesce($3, url),
        description = CASE WHEN $4 THEN $5 ELSE description END,
        event_types = coalesce($6, event_types),
        enabled = coalesce($7, enabled),
        consecutive_failures = CASE WHEN $7 THEN 0 ELSE consecutive_failures END,
        disabled_reason = CASE WHEN $7 THEN NULL WHEN $7 = false AND enabled THEN 'manual' ELSE disabled_reason END,
        disabled_at = CASE WHEN $7 THEN NULL WHEN $7 = false AND enabled THEN now() ELSE disabled_at END,
        updated_at = now(), sequence = sequence + 1
      WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL
      RETURNING ${ENDPOINT_COLUMNS}`,
    values: [
      id,
      accountId,
      patch.url ?? null,
      patch.description !== undefined,
      patch.description ?? null,
      patch.eventTypes ?? null,
      patch.enabled ?? null,
    ],
  });
  return rows[0] ?? null;
}

export async function endpointDelete(tx: Tx, accountId: string, id: string): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'endpoint_delete',
    text: `UPDATE webhook_endpoints SET deleted_at = now(), enabled = false, updated_at = now(), sequence = sequence + 1
      WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`,
    values: [id, accountId],
  });
  return rowCount === 1;
}

/** The old secret keeps signing (alongside the new one) until graceUntil. */
export async function endpointRotateSecret(
  tx: Tx,
  accountId: string,
  id: string,
  secret: string,
  graceUntil: Date,
): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_rotate_secret',
    text: `UPDATE webhook_endpoints
        SET previous_secret = secret, previous_secret_expires_at = $4, secret = $3, updated_at = now(), sequence = sequence + 1
      WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL
      RETURNING ${ENDPOINT_COLUMNS}`,
    values: [id, accountId, secret, graceUntil],
  });
  return rows[0] ?? null;
}

/** Takes the endpoint's row lock without changing it (delivery outcomes lock the endpoint first). */
export async function endpointLock(tx: Tx, id: string): Promise<void> {
  await tx.query({
    name: 'endpoint_lock',
    text: 'SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE',
    values: [id],
  });
}

/** A success resets the count; only writes when there is something to reset. */
export async function endpointRecordSuccess(tx: Tx, id: string): Promise<void> {
  await tx.query({
    name: 'endpoint_record_success',
    text: 'UPDATE webhook_endpoints SET consecutive_failures = 0 WHERE id = $1 AND consecutive_failures <> 0',
    values: [id],
  });
}

/** Counts a failed attempt atomically and returns the new count. */
export async function endpointRecordFailure(tx: Tx, id: string): Promise<number> {
  const { rows } = await tx.query<{ consecutive_failures: number }>({
    name: 'endpoint_record_failure',
    text: `UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1
            WHERE id = $1 RETURNING consecutive_failures`,
    values: [id],
  });
  return rows[0]?.consecutive_failures ?? 0;
}

/** enabled → disabled, once: the second caller finds it already disabled. */
export async function endpointDisable(tx: Tx, id: string, reason: DisableReason, now: Date): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'endpoint_disable',
    text: `UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, disabled_at = $3, updated_at = $3,
                                     sequence = sequence + 1
            WHERE id = $1 AND enabled`,
    values: [id, reason, now],
  });
  return rowCount === 1;
}
