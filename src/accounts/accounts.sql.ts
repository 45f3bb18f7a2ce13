// SQL for accounts, tenants (sub-accounts) and api_keys. An api key row keeps its
// public prefix (to find it) and a SHA-256 of the whole key (to compare), never
// the key. Reads named `…OfAccount` take the account and find only its rows.

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

export interface ApiKeySecretRow {
  id: string;
  account_id: string;
  secret_hash: Buffer;
  revoked_at: Date | null;
}

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

export async function apiKeyInsert(tx: Tx, accountId: string, prefix: string, secretHash: Buffer): Promise<string> {
  const { rows } = await tx.query<{ id: string }>({
    name: 'api_key_insert',
    text: 'INSERT INTO api_keys (account_id, prefix, secret_hash) VALUES ($1, $2, $3) RETURNING id',
    values: [accountId, prefix, secretHash],
  });
  return rows[0]!.id;
}

export async function apiKeyByPrefix(db: Db, prefix: string): Promise<ApiKeySecretRow | null> {
  const { rows } = await db.query<ApiKeySecretRow>({
    name: 'api_key_by_prefix',
    text: 'SELECT id, account_id, secret_hash, revoked_at FROM api_keys WHERE prefix = $1',
    values: [prefix],
  });
  return rows[0] ?? null;
}

/** Revokes a key of the account, once: a second revoke finds it revoked. */
export async function apiKeyRevoke(tx: Tx, accountId: string, keyId: string): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'api_key_revoke',
    text: 'UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL',
    values: [keyId, accountId],
  });
  return rowCount === 1;
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
export const ACCOUNT_TABLE_COLUMNS = { accounts: ACCOUNT_COLUMNS, tenants: TENANT_COLUMNS };
