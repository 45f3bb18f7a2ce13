// SQL for idempotency_keys: the stored first response to each (account, key),
// written in the transaction of the resource it created, kept RETENTION_HOURS.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export const IDEMPOTENCY_RETENTION_HOURS = 24;

export interface StoredResponse {
  request_hash: string;
  response_status: number;
  response_body: unknown;
}

/**
 * Holds (account, key) for the rest of the transaction, or says another request
 * holds it now (false). A lock rather than a row, so a request still running
 * leaves nothing behind when it rolls back.
 */
export async function idempotencyKeyTryLock(tx: Tx, accountId: string, key: string): Promise<boolean> {
  const { rows } = await tx.query<{ ok: boolean }>({
    name: 'idempotency_key_try_lock',
    text: 'SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS ok',
    values: [`idem:${accountId}:${key}`],
  });
  return rows[0]!.ok;
}

/** The response stored under the key within retention, if any. */
export async function idempotencyKeyFind(db: Db, accountId: string, key: string): Promise<StoredResponse | null> {
  const { rows } = await db.query<StoredResponse>({
    name: 'idempotency_key_find',
    text: `SELECT request_hash, response_status, response_body FROM idempotency_keys
            WHERE account_id = $1 AND key = $2 AND created_at > now() - make_interval(hours => $3)`,
    values: [accountId, key, IDEMPOTENCY_RETENTION_HOURS],
  });
  return rows[0] ?? null;
}

/** Stores the first response; a key past retention is reused. */
export async function idempotencyKeyStore(
  tx: Tx,
  accountId: string,
  key: string,
  response: { requestHash: string; status: number; body: unknown },
): Promise<void> {
  await tx.query({
    name: 'idempotency_key_store',
    text: `INSERT INTO idempotency_keys (account_id, key, request_hash, response_status, response_body)
           VALUES ($1, $2, $3, $4, $5::jsonb)
           ON CONFLICT (account_id, key) DO UPDATE
             SET request_hash = EXCLUDED.request_hash, response_status = EXCLUDED.response_status,
                 response_body = EXCLUDED.response_body, created_at = now()`,
    values: [accountId, key, response.requestHash, response.status, JSON.stringify(response.body)],
  });
}

/** Deletes keys past retention; run by the maintenance job. */
export async function idempotencyKeysExpire(db: Db): Promise<number> {
  const { rowCount } = await db.query({
    name: 'idempotency_keys_expire',
    text: 'DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(hours => $1)',
    values: [IDEMPOTENCY_RETENTION_HOURS],
  });
  return rowCount ?? 0;
}
