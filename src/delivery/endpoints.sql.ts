// SQL for webhook_endpoints: a customer's receiving URLs, which event types each
// takes, and the health that disables one after repeated failure. Every change a
// customer can see is one guarded statement that returns the row it changed (and
// bumps its `sequence`), or nothing when it did not apply. The health counters
// (failures in a row, timing out, the last failure) are bookkeeping, not changes.
//
//   enabled ──N failures / 410 / PATCH enabled:false──▶ disabled ──PATCH enabled:true──▶ enabled
//      └──────────────────────── DELETE (deleted_at, secrets wiped) ─────────────────────────┘

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import type { EventType } from '../outbox/outbox.sql.js';

export const DISABLE_REASONS = ['consecutive_failures', 'gone', 'manual'] as const;
export type DisableReason = (typeof DISABLE_REASONS)[number];

/** The last attempt that failed, as the endpoint's health and the disabled event report it. */
export interface LastFailure {
  at: string;
  status: number | null;
  error: string | null;
}

export interface EndpointRow {
  id: string;
  account_id: string;
  url: string;
  description: string | null;
  /** Only types the API accepted (it validates them against the list). */
  event_types: EventType[];
  enabled: boolean;
  disabled_reason: DisableReason | null;
  disabled_at: Date | null;
  consecutive_failures: number;
  /** Its last attempt timed out: one attempt at a time, in its lane, until it answers again. */
  timing_out: boolean;
  last_failure: LastFailure | null;
  created_at: Date;
  updated_at: Date;
  deleted_at: Date | null;
  /** Grows by one with each change a customer can see (guarded statements below). */
  sequence: number;
}
const ENDPOINT_COLUMNS = `id, account_id, url, description, event_types, enabled, disabled_reason, disabled_at,
  consecutive_failures, timing_out, last_failure, created_at, updated_at, deleted_at, sequence`;

/** The column list the row above is typed from, held to the table by a test. */
export const ENDPOINT_TABLE_COLUMNS = { webhook_endpoints: ENDPOINT_COLUMNS };

/**
 * Adds an endpoint unless the account already has `cap` (not deleted); null then.
 * The caller holds the account's lock (accountLock), so two creates at once count
 * each other.
 */
export async function endpointInsert(
  tx: Tx,
  e: { id: string; accountId: string; url: string; description: string | null; eventTypes: string[]; cap: number },
): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_insert',
    text: `INSERT INTO webhook_endpoints (id, account_id, url, description, event_types)
           SELECT $1, $2, $3, $4, $5
            WHERE (SELECT count(*) FROM webhook_endpoints WHERE account_id = $2 AND deleted_at IS NULL) < $6
           RETURNING ${ENDPOINT_COLUMNS}`,
    values: [e.id, e.accountId, e.url, e.description, e.eventTypes, e.cap],
  });
  return rows[0] ?? null;
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

/** Changes url, description or event types; null when there is no such endpoint. */
export async function endpointUpdate(
  tx: Tx,
  accountId: string,
  id: string,
  patch: { url?: string | undefined; description?: string | null | undefined; eventTypes?: string[] | undefined },
): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_update',
    text: `UPDATE webhook_endpoints SET
              url = coalesce($3, url),
              description = CASE WHEN $4 THEN $5 ELSE description END,
              event_types = coalesce($6, event_types),
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
    ],
  });
  return rows[0] ?? null;
}

/** disabled → enabled, once, with a clean bill of health; null when it was not disabled. */
export async function endpointEnable(tx: Tx, accountId: string, id: string, at: Date): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_enable',
    text: `UPDATE webhook_endpoints SET enabled = true, disabled_reason = NULL, disabled_at = NULL,
                  consecutive_failures = 0, timing_out = false, updated_at = $3, sequence = sequence + 1
            WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL AND NOT enabled
            RETURNING ${ENDPOINT_COLUMNS}`,
    values: [id, accountId, at],
  });
  return rows[0] ?? null;
}

/** enabled → disabled, once: the second caller finds it already disabled (null). */
export async function endpointDisable(
  tx: Tx,
  id: string,
  reason: DisableReason,
  at: Date,
): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_disable',
    text: `UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, disabled_at = $3, updated_at = $3,
                  sequence = sequence + 1
            WHERE id = $1 AND enabled AND deleted_at IS NULL
            RETURNING ${ENDPOINT_COLUMNS}`,
    values: [id, reason, at],
  });
  return rows[0] ?? null;
}

/** → deleted, once; it receives nothing after this (its secrets are wiped beside it). */
export async function endpointDelete(tx: Tx, accountId: string, id: string, at: Date): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_delete',
    text: `UPDATE webhook_endpoints SET deleted_at = $3, enabled = false, updated_at = $3, sequence = sequence + 1
            WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL
            RETURNING ${ENDPOINT_COLUMNS}`,
    values: [id, accountId, at],
  });
  return rows[0] ?? null;
}

/** A rotation is a change of the endpoint (its secrets are in webhook_endpoint_secrets). */
export async function endpointTouch(tx: Tx, accountId: string, id: string, at: Date): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_touch',
    text: `UPDATE webhook_endpoints SET updated_at = $3, sequence = sequence + 1
            WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL
            RETURNING ${ENDPOINT_COLUMNS}`,
    values: [id, accountId, at],
  });
  return rows[0] ?? null;
}

/** Takes the endpoint's row lock and reads it (delivery outcomes lock the endpoint first). */
export async function endpointLock(tx: Tx, id: string): Promise<EndpointRow | null> {
  const { rows } = await tx.query<EndpointRow>({
    name: 'endpoint_lock',
    text: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE`,
    values: [id],
  });
  return rows[0] ?? null;
}

/** An answer in time: healthy again. Only writes when there is something to reset. */
export async function endpointRecordSuccess(tx: Tx, id: string): Promise<void> {
  await tx.query({
    name: 'endpoint_record_success',
    text: `UPDATE webhook_endpoints SET consecutive_failures = 0, timing_out = false
            WHERE id = $1 AND (consecutive_failures <> 0 OR timing_out)`,
    values: [id],
  });
}

/** Counts a failed attempt atomically and returns the new count; a timeout trips the breaker. */
export async function endpointRecordFailure(
  tx: Tx,
  id: string,
  failure: LastFailure & { timedOut: boolean },
): Promise<number> {
  const { rows } = await tx.query<{ consecutive_failures: number }>({
    name: 'endpoint_record_failure',
    text: `UPDATE webhook_endpoints
              SET consecutive_failures = consecutive_failures + 1, timing_out = $2, last_failure = $3::jsonb
            WHERE id = $1 RETURNING consecutive_failures`,
    values: [id, failure.timedOut, JSON.stringify({ at: failure.at, status: failure.status, error: failure.error })],
  });
  return rows[0]?.consecutive_failures ?? 0;
}

/** A failed attempt that does not count (a redelivery): it still tells whether the endpoint answers. */
export async function endpointRecordTimeout(tx: Tx, id: string, timedOut: boolean): Promise<void> {
  await tx.query({
    name: 'endpoint_record_timeout',
    text: 'UPDATE webhook_endpoints SET timing_out = $2 WHERE id = $1 AND timing_out <> $2',
    values: [id, timedOut],
  });
}
