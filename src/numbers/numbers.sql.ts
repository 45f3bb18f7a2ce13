// SQL for phone_numbers. A number is unique at its carrier; inbound carrier events
// find their account through (carrier, number). Reads named `…OfAccount` take the
// account and find only its rows. A send or a call takes its number with FOR KEY
// SHARE (numberOwned), so a release (numberLockOfAccount, then numberDelete) waits
// for the ones under way and the next ones find the number gone.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export interface PhoneNumberRow {
  id: string;
  account_id: string;
  tenant_id: string | null;
  carrier: string;
  number: string;
  inbound_ring: string[];
  ring_timeout_secs: number;
  created_at: Date;
  /** Inbound calls to the number are recorded once bridged, and transcribed (which implies recorded). */
  inbound_record: boolean;
  inbound_transcribe: boolean;
  /** At most this many messages a second leave the number, across all workers (pace.sql.ts); null: no limit. */
  mps: number | null;
}
const NUMBER_COLUMNS =
  'id, account_id, tenant_id, carrier, number, inbound_ring, ring_timeout_secs, created_at, inbound_record, inbound_transcribe, mps';

/** The column list the row above is typed from, held to the table by a test. */
export const NUMBER_TABLE_COLUMNS = { phone_numbers: NUMBER_COLUMNS };

/** Adds the number to the account; null when the carrier's number is someone's already. */
export async function numberInsert(
  tx: Tx,
  n: {
    accountId: string;
    tenantId: string | null;
    carrier: string;
    number: string;
    inboundRing: string[];
    ringTimeoutSecs: number;
    inboundRecord?: boolean;
    inboundTranscribe?: boolean;
    mps?: number | null;
  },
): Promise<PhoneNumberRow | null> {
  const { rows } = await tx.query<PhoneNumberRow>({
    name: 'number_insert',
    text: `INSERT INTO phone_numbers (account_id, tenant_id, carrier, number, inbound_ring, ring_timeout_secs,
                                      inbound_record, inbound_transcribe, mps)
           VALUES ($1, $2, $3, $4, $5, $6, $7 OR $8, $8, $9)
           ON CONFLICT (carrier, number) DO NOTHING
           RETURNING ${NUMBER_COLUMNS}`,
    values: [
      n.accountId,
      n.tenantId,
      n.carrier,
      n.number,
      n.inboundRing,
      n.ringTimeoutSecs,
      n.inboundRecord ?? false,
      n.inboundTranscribe ?? false,
      n.mps ?? null,
    ],
  });
  return rows[0] ?? null;
}

export async function numberList(
  db: Db,
  accountId: string,
  limit: number,
  startingAfter: string | null,
): Promise<PhoneNumberRow[]> {
  const { rows } = await db.query<PhoneNumberRow>({
    name: 'number_list',
    text: `SELECT ${NUMBER_COLUMNS} FROM phone_numbers WHERE account_id = $1 AND ($2::text IS NULL OR id < $2)
            ORDER BY id DESC LIMIT $3`,
    values: [accountId, startingAfter, limit + 1],
  });
  return rows;
}

export async function numberOfAccount(db: Db, accountId: string, id: string): Promise<PhoneNumberRow | null> {
  const { rows } = await db.query<PhoneNumberRow>({
    name: 'number_of_account',
    text: `SELECT ${NUMBER_COLUMNS} FROM phone_numbers WHERE id = $1 AND account_id = $2`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

/** The number a carrier event is addressed to, whoever owns it (routing). */
export async function numberAtCarrier(db: Db, carrier: string, number: string): Promise<PhoneNumberRow | null> {
  const { rows } = await db.query<PhoneNumberRow>({
    name: 'number_at_carrier',
    text: `SELECT ${NUMBER_COLUMNS} FROM phone_numbers WHERE carrier = $1 AND number = $2`,
    values: [carrier, number],
  });
  return rows[0] ?? null;
}

/**
 * An account's own number (at whichever carrier), or null when the account does not
 * own it; in a transaction, held against a release until it commits.
 */
export async function numberOwned(db: Db, accountId: string, number: string): Promise<PhoneNumberRow | null> {
  const { rows } = await db.query<PhoneNumberRow>({
    name: 'number_owned',
    text: `SELECT ${NUMBER_COLUMNS} FROM phone_numbers WHERE number = $1 AND account_id = $2 ORDER BY id LIMIT 1
           FOR KEY SHARE`,
    values: [number, accountId],
  });
  return rows[0] ?? null;
}

/**
 * numberOwned for many numbers in one statement: each of them the account holds,
 * by number (the first by id where it holds one at two carriers), held the same way.
 */
export async function numbersOwned(
  db: Db,
  accountId: string,
  numbers: readonly string[],
): Promise<Map<string, PhoneNumberRow>> {
  if (numbers.length === 0) return new Map();
  const { rows } = await db.query<PhoneNumberRow>({
    name: 'numbers_owned',
    // FOR KEY SHARE cannot sit beside DISTINCT: the held rows are chosen from after they are locked.
    text: `WITH held AS (SELECT ${NUMBER_COLUMNS} FROM phone_numbers WHERE account_id = $1 AND number = ANY($2::text[])
                          ORDER BY id FOR KEY SHARE)
           SELECT DISTINCT ON (number) ${NUMBER_COLUMNS} FROM held ORDER BY number, id`,
    values: [accountId, [...new Set(numbers)]],
  });
  return new Map(rows.map((r) => [r.number, r]));
}

/** Whether the account itself holds this number at this carrier (a second claim of one's own number). */
export async function numberHeldByAccount(
  db: Db,
  accountId: string,
  carrier: string,
  number: string,
): Promise<boolean> {
  const { rows } = await db.query({
    name: 'number_held_by_account',
    text: 'SELECT 1 FROM phone_numbers WHERE account_id = $1 AND carrier = $2 AND number = $3',
    values: [accountId, carrier, number],
  });
  return rows.length === 1;
}

/**
 * Locks the account's number for its release: waits for the sends and calls that
 * took it (FOR KEY SHARE) to commit, and holds back those that would take it next.
 */
export async function numberLockOfAccount(tx: Tx, accountId: string, id: string): Promise<PhoneNumberRow | null> {
  const { rows } = await tx.query<PhoneNumberRow>({
    name: 'number_lock_of_account',
    text: `SELECT ${NUMBER_COLUMNS} FROM phone_numbers WHERE id = $1 AND account_id = $2 FOR UPDATE`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

export async function numberDelete(tx: Tx, id: string): Promise<void> {
  await tx.query({ name: 'number_delete', text: 'DELETE FROM phone_numbers WHERE id = $1', values: [id] });
}
