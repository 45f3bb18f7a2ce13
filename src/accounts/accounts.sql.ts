// SQL for accounts, tenants (sub-accounts) and api_keys. An api key row keeps its
// public prefix (to find it) and a SHA-256 of the whole key (to compare), never
// the key. Reads named `…OfAccount` take the account and find only its rows. A key
// is live while it is neither revoked nor past its expires_at; every change that
// ends a key or moves its end is announced on API_KEY_CHANNEL in its transaction,
// so every API process forgets what it cached about the key when it commits.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export interface AccountRow {
  id: string;
  name: string;
  created_at: Date;
}
const ACCOUNT_COLUMNS = 'id, name, created_at';

export interface TenantRow {
  id: string;
  account_id: string;
  name: string;
  created_at: Date;
}
const TENANT_COLUMNS = 'id, account_id, name, created_at';

export interface ApiKeyRow {
  id: string;
  account_id: string;
  /** The key's first characters, in clear: how a presented key finds its row. */
  prefix: string;
  secret_hash: Buffer;
  name: string | null;
  created_at: Date;
  last_used_at: Date | null;
  /** Set by a roll: the key works until then. Null: it lasts until revoked. */
  expires_at: Date | null;
  revoked_at: Date | null;
}
const API_KEY_COLUMNS = 'id, account_id, prefix, secret_hash, name, created_at, last_used_at, expires_at, revoked_at';

/** What authentication reads of a key. */
export type ApiKeySecretRow = Pick<ApiKeyRow, 'id' | 'account_id' | 'secret_hash' | 'revoked_at' | 'expires_at'>;

/** The NOTIFY channel a key's end (revoke, roll, expiry moved) is announced on; the payload is the key's id. */
export const API_KEY_CHANNEL = 'handset_api_keys';

/** Live at `now`: the guard every read and change of a usable key shares (parameter `now` is its $n). */
const live = (now: string) => `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${now})`;

export async function accountInsert(tx: Tx, name: string): Promise<AccountRow> {
  const { rows } = await tx.query<AccountRow>({
    name: 'account_insert',
    text: `INSERT INTO accounts (name) VALUES ($1) RETURNING ${ACCOUNT_COLUMNS}`,
    values: [name],
  });
  return rows[0]!;
}

export async function accountExists(db: Db, id: string): Promise<boolean> {
  const { rows } = await db.query({
    name: 'account_exists',
    text: 'SELECT 1 FROM accounts WHERE id = $1',
    values: [id],
  });
  return rows.length === 1;
}

/**
 * Serializes one account's changes that are bounded by a count of its rows (its
 * endpoints, its recoveries), so two requests at once cannot both take the last place.
 */
export async function accountLock(tx: Tx, id: string): Promise<boolean> {
  const { rows } = await tx.query({
    name: 'account_lock',
    text: 'SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE',
    values: [id],
  });
  return rows.length === 1;
}

export async function apiKeyInsert(
  tx: Tx,
  k: { accountId: string; prefix: string; secretHash: Buffer; name: string | null; now: Date },
): Promise<ApiKeyRow> {
  const { rows } = await tx.query<ApiKeyRow>({
    name: 'api_key_insert',
    text: `INSERT INTO api_keys (account_id, prefix, secret_hash, name, created_at) VALUES ($1, $2, $3, $4, $5)
           RETURNING ${API_KEY_COLUMNS}`,
    values: [k.accountId, k.prefix, k.secretHash, k.name, k.now],
  });
  return rows[0]!;
}

export async function apiKeyByPrefix(db: Db, prefix: string): Promise<ApiKeySecretRow | null> {
  const { rows } = await db.query<ApiKeySecretRow>({
    name: 'api_key_by_prefix',
    text: 'SELECT id, account_id, secret_hash, revoked_at, expires_at FROM api_keys WHERE prefix = $1',
    values: [prefix],
  });
  return rows[0] ?? null;
}

/** The account's live keys, newest first (a revoked or expired key is gone from the list). */
export async function apiKeyList(
  db: Db,
  accountId: string,
  limit: number,
  startingAfter: string | null,
  now: Date,
): Promise<ApiKeyRow[]> {
  const { rows } = await db.query<ApiKeyRow>({
    name: 'api_key_list',
    text: `SELECT ${API_KEY_COLUMNS} FROM api_keys
            WHERE account_id = $1 AND ($2::text IS NULL OR id < $2) AND ${live('$4')}
            ORDER BY id DESC LIMIT $3`,
    values: [accountId, startingAfter, limit + 1, now],
  });
  return rows;
}

/** A live key of the account, or null (another account's, revoked, expired or unknown). */
export async function apiKeyLiveOfAccount(
  db: Db,
  accountId: string,
  keyId: string,
  now: Date,
): Promise<ApiKeyRow | null> {
  const { rows } = await db.query<ApiKeyRow>({
    name: 'api_key_live_of_account',
    text: `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE id = $1 AND account_id = $2 AND ${live('$3')}`,
    values: [keyId, accountId, now],
  });
  return rows[0] ?? null;
}

/**
 * How many live keys of the account, other than `exceptId`, last (have no
 * expiry): what would still open the account after `exceptId` is revoked.
 */
export async function apiKeyLastingOthers(tx: Tx, accountId: string, exceptId: string, now: Date): Promise<number> {
  const { rows } = await tx.query<{ n: number }>({
    name: 'api_key_lasting_others',
    text: `SELECT count(*)::int AS n FROM api_keys
            WHERE account_id = $1 AND id <> $2 AND expires_at IS NULL AND ${live('$3')}`,
    values: [accountId, exceptId, now],
  });
  return rows[0]!.n;
}

/** Revokes a live key of the account, once: a second revoke (or one of an expired key) finds nothing. */
export async function apiKeyRevoke(tx: Tx, accountId: string, keyId: string, now = new Date()): Promise<boolean> {
  const { rows } = await tx.query({
    name: 'api_key_revoke',
    text: `WITH revoked AS (
             UPDATE api_keys SET revoked_at = $3 WHERE id = $1 AND account_id = $2 AND ${live('$3')} RETURNING id
           )
           SELECT pg_notify('${API_KEY_CHANNEL}', id) FROM revoked`,
    values: [keyId, accountId, now],
  });
  return rows.length === 1;
}

/**
 * Ends a live key of the account at `expiresAt` (or keeps its sooner end), for a
 * roll: the key works until then. Null when the account has no such live key.
 */
export async function apiKeyExpire(
  tx: Tx,
  accountId: string,
  keyId: string,
  expiresAt: Date,
  now: Date,
): Promise<ApiKeyRow | null> {
  const { rows } = await tx.query<ApiKeyRow>({
    name: 'api_key_expire',
    text: `WITH expired AS (
             UPDATE api_keys SET expires_at = LEAST(coalesce(expires_at, 'infinity'), $3)
              WHERE id = $1 AND account_id = $2 AND ${live('$4')}
             RETURNING ${API_KEY_COLUMNS}
           )
           SELECT ${API_KEY_COLUMNS}, pg_notify('${API_KEY_CHANNEL}', id) FROM expired`,
    values: [keyId, accountId, expiresAt, now],
  });
  if (!rows[0]) return null;
  const { pg_notify: _, ...row } = rows[0] as ApiKeyRow & { pg_notify: unknown };
  return row;
}

/**
 * Records that the key was used at `now`, unless that was recorded less than a
 * minute before: bookkeeping cheap enough to run on use (the guard makes a
 * second process's touch in the same minute a no-op).
 */
export async function apiKeyTouch(db: Db, keyId: string, now: Date): Promise<void> {
  await db.query({
    name: 'api_key_touch',
    text: `UPDATE api_keys SET last_used_at = $2
            WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2::timestamptz - interval '1 minute')`,
    values: [keyId, now],
  });
}

export async function tenantInsert(tx: Tx, accountId: string, name: string): Promise<TenantRow> {
  const { rows } = await tx.query<TenantRow>({
    name: 'tenant_insert',
    text: `INSERT INTO tenants (account_id, name) VALUES ($1, $2) RETURNING ${TENANT_COLUMNS}`,
    values: [accountId, name],
  });
  return rows[0]!;
}

export async function tenantOfAccount(db: Db, accountId: string, id: string): Promise<TenantRow | null> {
  const { rows } = await db.query<TenantRow>({
    name: 'tenant_of_account',
    text: `SELECT ${TENANT_COLUMNS} FROM tenants WHERE id = $1 AND account_id = $2`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

export async function tenantList(
  db: Db,
  accountId: string,
  limit: number,
  startingAfter: string | null,
): Promise<TenantRow[]> {
  const { rows } = await db.query<TenantRow>({
    name: 'tenant_list',
    text: `SELECT ${TENANT_COLUMNS} FROM tenants WHERE account_id = $1 AND ($2::text IS NULL OR id < $2)
            ORDER BY id DESC LIMIT $3`,
    values: [accountId, startingAfter, limit + 1],
  });
  return rows;
}

/** The column lists the rows above are typed from, held to the tables by a test. */
export const ACCOUNT_TABLE_COLUMNS = { accounts: ACCOUNT_COLUMNS, tenants: TENANT_COLUMNS, api_keys: API_KEY_COLUMNS };
