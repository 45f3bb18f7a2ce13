// Accounts and their API keys. A key is shown once when created (or rolled); only
// its public prefix and a SHA-256 hash are stored (accounts.sql.ts), and a
// presented key is compared with the hash in constant time. An account manages
// its own keys: it lists them, makes more, revokes one (never, unless it says so,
// the last one that lasts) and rolls one (Stripe's roll: a new key, and the old
// one keeps working for an overlap).

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import {
  type AccountRow,
  type ApiKeyRow,
  accountInsert,
  accountLock,
  apiKeyByPrefix,
  apiKeyExpire,
  apiKeyInsert,
  apiKeyLastingOthers,
  apiKeyLiveOfAccount,
  apiKeyRevoke,
} from './accounts.sql.js';

export interface Principal {
  accountId: string;
  apiKeyId: string;
}

/** What authentication learned of a key: who it is, and until when it works (null: until revoked). */
export interface KeyGrant extends Principal {
  expiresAt: Date | null;
}

const KEY_PREFIX = 'hsk_';
const KEY_PATTERN = /^hsk_[A-Za-z0-9_-]{32}$/;
const PREFIX_LENGTH = KEY_PREFIX.length + 10;

/** A roll's default overlap: the old key keeps working this long (Stripe's default, 24 h). */
export const ROLL_OVERLAP_SECONDS = 86_400;

export const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest();

/** Whether text has the shape of a key at all; anything else is refused without a lookup. */
export const isKeyShaped = (text: string) => KEY_PATTERN.test(text);

export function accountCreate(tx: Tx, name: string): Promise<AccountRow> {
  return accountInsert(tx, name);
}

/** Creates a key and returns it in clear: the only time it is ever visible. */
export async function apiKeyCreate(
  tx: Tx,
  accountId: string,
  opts: { name?: string | null; now?: Date } = {},
): Promise<{ id: string; key: string; row: ApiKeyRow }> {
  const key = KEY_PREFIX + randomBytes(24).toString('base64url');
  const row = await apiKeyInsert(tx, {
    accountId,
    prefix: key.slice(0, PREFIX_LENGTH),
    secretHash: sha256(key),
    name: opts.name ?? null,
    now: opts.now ?? new Date(),
  });
  return { id: row.id, key, row };
}

/** A key as the API and the CLI show it: never its secret, nor its hash. */
export const apiKeyResource = (k: ApiKeyRow) => ({
  id: k.id,
  name: k.name,
  created_at: k.created_at.toISOString(),
  last_used_at: k.last_used_at?.toISOString() ?? null,
  expires_at: k.expires_at?.toISOString() ?? null,
});

/**
 * Looks a presented key up in the database: the account it belongs to, or null
 * for a malformed, unknown, revoked or expired key.
 */
export async function lookupKey(db: Db, presented: string, now: Date): Promise<KeyGrant | null> {
  if (!isKeyShaped(presented)) return null;
  const row = await apiKeyByPrefix(db, presented.slice(0, PREFIX_LENGTH));
  // Hash even when there is no row, so a miss costs the same as a mismatch.
  const presentedHash = sha256(presented);
  if (!row || !timingSafeEqual(presentedHash, row.secret_hash) || row.revoked_at) return null;
  if (row.expires_at && row.expires_at <= now) return null;
  return { accountId: row.account_id, apiKeyId: row.id, expiresAt: row.expires_at };
}

/** The account a presented key belongs to, or null for a malformed, unknown, revoked or expired key. */
export async function authenticate(db: Db, presented: string, now = new Date()): Promise<Principal | null> {
  const grant = await lookupKey(db, presented, now);
  return grant && { accountId: grant.accountId, apiKeyId: grant.apiKeyId };
}

export type RevokeResult = { applied: true } | { applied: false; reason: 'not_found' | 'last_key' };

/**
 * Revokes a live key of the account. Refused (`last_key`) when no other live key
 * without an expiry would be left, unless `force`: the account would be locked out
 * of the API. The account row is locked first, so two revokes at once cannot each
 * count the other's key as the one that stays.
 */
export async function apiKeyRevokeGuarded(
  tx: Tx,
  accountId: string,
  keyId: string,
  opts: { force: boolean; now: Date },
): Promise<RevokeResult> {
  if (!(await accountLock(tx, accountId))) return { applied: false, reason: 'not_found' };
  if (!(await apiKeyLiveOfAccount(tx, accountId, keyId, opts.now))) return { applied: false, reason: 'not_found' };
  if (!opts.force && (await apiKeyLastingOthers(tx, accountId, keyId, opts.now)) === 0) {
    return { applied: false, reason: 'last_key' };
  }
  await apiKeyRevoke(tx, accountId, keyId, opts.now);
  return { applied: true };
}

/**
 * Rolls a live key of the account: a new key with the same name, and the old one
 * ends `overlapSeconds` from now (0: at once), or sooner if it already ended
 * sooner. Null when the account has no such live key.
 */
export async function apiKeyRoll(
  tx: Tx,
  accountId: string,
  keyId: string,
  opts: { overlapSeconds: number; now: Date },
): Promise<{ old: ApiKeyRow; created: { key: string; row: ApiKeyRow } } | null> {
  if (!(await accountLock(tx, accountId))) return null;
  const old = await apiKeyExpire(
    tx,
    accountId,
    keyId,
    new Date(opts.now.getTime() + opts.overlapSeconds * 1000),
    opts.now,
  );
  if (!old) return null;
  const created = await apiKeyCreate(tx, accountId, { name: old.name, now: opts.now });
  return { old, created };
}
