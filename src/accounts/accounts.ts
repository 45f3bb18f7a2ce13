// Accounts, their optional tenants (sub-accounts) and API keys. A key is shown
// once when created; only its public prefix and a SHA-256 hash are stored, and a
// presented key is compared with the hash in constant time.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export interface Account {
  id: string;
  name: string;
  created_at: Date;
}

export interface Tenant {
  id: string;
  account_id: string;
  name: string;
  created_at: Date;
}

export interface Principal {
  accountId: string;
  apiKeyId: string;
}

const KEY_PREFIX = 'hsk_';
const KEY_PATTERN = /^hsk_[A-Za-z0-9_-]{32}$/;
const PREFIX_LENGTH = KEY_PREFIX.length + 10;

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest();

export async function accountCreate(tx: Tx, name: string): Promise<Account> {
  const { rows } = await tx.query<Account>('INSERT INTO accounts (name) VALUES ($1) RETURNING *', [name]);
  return rows[0]!;
}

/** Creates a key and returns it in clear: the only time it is ever visible. */
export async function apiKeyCreate(tx: Tx, accountId: string): Promise<{ id: string; key: string }> {
  const key = KEY_PREFIX + randomBytes(24).toString('base64url');
  const { rows } = await tx.query<{ id: string }>(
    'INSERT INTO api_keys (account_id, prefix, secret_hash) VALUES ($1, $2, $3) RETURNING id',
    [accountId, key.slice(0, PREFIX_LENGTH), sha256(key)],
  );
  return { id: rows[0]!.id, key };
}

export async function apiKeyRevoke(tx: Tx, accountId: string, keyId: string): Promise<boolean> {
  const { rowCount } = await tx.query(
    'UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL',
    [keyId, accountId],
  );
  return rowCount === 1;
}

/** The account a presented key belongs to, or null for a malformed, unknown or revoked key. */
export async function authenticate(db: Db, presented: string): Promise<Principal | null> {
  if (!KEY_PATTERN.test(presented)) return null;
  const { rows } = await db.query<{ id: string; account_id: string; secret_hash: Buffer; revoked_at: Date | null }>({
    name: 'api_key_by_prefix',
    text: 'SELECT id, account_id, secret_hash, revoked_at FROM api_keys WHERE prefix = $1',
    values: [presented.slice(0, PREFIX_LENGTH)],
  });
  const row = rows[0];
  // Hash even when there is no row, so a miss costs the same as a mismatch.
  const presentedHash = sha256(presented);
  if (!row || !timingSafeEqual(presentedHash, row.secret_hash) || row.revoked_at) return null;
  return { accountId: row.account_id, apiKeyId: row.id };
}

export async function tenantCreate(tx: Tx, accountId: string, name: string): Promise<Tenant> {
  const { rows } = await tx.query<Tenant>('INSERT INTO tenants (account_id, name) VALUES ($1, $2) RETURNING *', [
    accountId,
    name,
  ]);
  return rows[0]!;
}

export async function tenantGet(db: Db, accountId: string, id: string): Promise<Tenant | null> {
  const { rows } = await db.query<Tenant>('SELECT * FROM tenants WHERE id = $1 AND account_id = $2', [id, accountId]);
  return rows[0] ?? null;
}

export async function tenantList(
  db: Db,
  accountId: string,
  limit: number,
  startingAfter: string | null,
): Promise<Tenant[]> {
  const { rows } = await db.query<Tenant>(
    `SELECT * FROM tenants WHERE account_id = $1 AND ($2::text IS NULL OR id < $2)
      ORDER BY id DESC LIMIT $3`,
    [accountId, startingAfter, limit + 1],
  );
  return rows;
}
