// Accounts and their API keys. A key is shown once when created; only its public
// prefix and a SHA-256 hash are stored (accounts.sql.ts), and a presented key is
// compared with the hash in constant time.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import { type AccountRow, accountInsert, apiKeyByPrefix, apiKeyInsert } from './accounts.sql.js';

export interface Principal {
  accountId: string;
  apiKeyId: string;
}

const KEY_PREFIX = 'hsk_';
const KEY_PATTERN = /^hsk_[A-Za-z0-9_-]{32}$/;
const PREFIX_LENGTH = KEY_PREFIX.length + 10;

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest();

export function accountCreate(tx: Tx, name: string): Promise<AccountRow> {
  return accountInsert(tx, name);
}

/** Creates a key and returns it in clear: the only time it is ever visible. */
export async function apiKeyCreate(tx: Tx, accountId: string): Promise<{ id: string; key: string }> {
  const key = KEY_PREFIX + randomBytes(24).toString('base64url');
  const id = await apiKeyInsert(tx, accountId, key.slice(0, PREFIX_LENGTH), sha256(key));
  return { id, key };
}

/** The account a presented key belongs to, or null for a malformed, unknown or revoked key. */
export async function authenticate(db: Db, presented: string): Promise<Principal | null> {
  if (!KEY_PATTERN.test(presented)) return null;
  const row = await apiKeyByPrefix(db, presented.slice(0, PREFIX_LENGTH));
  // Hash even when there is no row, so a miss costs the same as a mismatch.
  const presentedHash = sha256(presented);
  if (!row || !timingSafeEqual(presentedHash, row.secret_hash) || row.revoked_at) return null;
  return { accountId: row.account_id, apiKeyId: row.id };
}
