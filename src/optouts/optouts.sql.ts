// SQL for opt_outs: who may no longer be messaged from which of an account's
// numbers. Opting out inserts (at most one active row per pair, ON CONFLICT DO
// NOTHING), opting back in stamps deleted_at on the active row; each returns the
// row it changed or nothing. Both take the pair's lock first, as the dispatcher
// does before it checks the list (messages.sql.ts), so a send and an opt-out of the
// same pair are ordered, and created_at/deleted_at (the database's clock, like the
// dispatcher's dispatched_at) say which came first.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

/** How an opt-out came to be: a STOP texted to us, a carrier refusal, or the account's own entry. */
export const OPT_OUT_SOURCES = ['keyword', 'carrier', 'api'] as const;
export type OptOutSource = (typeof OPT_OUT_SOURCES)[number];

export interface OptOutRow {
  id: string;
  account_id: string;
  tenant_id: string | null;
  /** The account's own number. */
  number: string;
  /** Who opted out of messages from it. */
  recipient: string;
  source: OptOutSource;
  created_at: Date;
  /** When they opted back in; the row then no longer counts. */
  deleted_at: Date | null;
  sequence: number;
}
const OPT_OUT_COLUMNS = 'id, account_id, tenant_id, number, recipient, source, created_at, deleted_at, sequence';

/** The column list the row above is typed from, held to the table by a test. */
export const OPT_OUT_TABLE_COLUMNS = { opt_outs: OPT_OUT_COLUMNS };

export interface Pair {
  accountId: string;
  number: string;
  recipient: string;
}

const pairKey = (p: Pair) => `opt_out:${p.accountId}:${p.number}:${p.recipient}`;

/** Taken by whoever changes the pair's opt-out; waits for any dispatcher checking it. */
export async function pairLockExclusive(tx: Tx, p: Pair): Promise<void> {
  await tx.query({
    name: 'opt_out_pair_lock',
    text: 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))',
    values: [pairKey(p)],
  });
}

/** Taken by a dispatcher checking the pair: many sends at once, never beside a change. */
export async function pairLockShared(tx: Tx, p: Pair): Promise<void> {
  await tx.query({
    name: 'opt_out_pair_lock_shared',
    text: 'SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))',
    values: [pairKey(p)],
  });
}

/** pairLockShared for many pairs in one statement, in one order (so two dispatchers cannot deadlock). */
export async function pairLocksShared(tx: Tx, pairs: readonly Pair[]): Promise<void> {
  if (pairs.length === 0) return;
  await tx.query({
    name: 'opt_out_pair_locks_shared',
    text: `SELECT count(pg_advisory_xact_lock_shared(hashtextextended(k, 0)))
             FROM (SELECT DISTINCT k FROM unnest($1::text[]) AS u (k) ORDER BY k) s`,
    values: [pairs.map(pairKey)],
  });
}

/** Opts the pair out; null when it already was (nothing changed). */
export async function optOutInsert(
  tx: Tx,
  o: Pair & { tenantId: string | null; source: OptOutSource },
): Promise<OptOutRow | null> {
  const { rows } = await tx.query<OptOutRow>({
    name: 'opt_out_insert',
    text: `INSERT INTO opt_outs (account_id, tenant_id, number, recipient, source)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (account_id, number, recipient) WHERE deleted_at IS NULL DO NOTHING
           RETURNING ${OPT_OUT_COLUMNS}`,
    values: [o.accountId, o.tenantId, o.number, o.recipient, o.source],
  });
  return rows[0] ?? null;
}

/** Opts the pair back in; null when it was not opted out. */
export async function optOutEndForPair(tx: Tx, p: Pair): Promise<OptOutRow | null> {
  const { rows } = await tx.query<OptOutRow>({
    name: 'opt_out_end_for_pair',
    text: `UPDATE opt_outs SET deleted_at = clock_timestamp(), sequence = sequence + 1
            WHERE account_id = $1 AND number = $2 AND recipient = $3 AND deleted_at IS NULL
            RETURNING ${OPT_OUT_COLUMNS}`,
    values: [p.accountId, p.number, p.recipient],
  });
  return rows[0] ?? null;
}

/** Ends one of the account's active opt-outs by id; null when it has none by that id. */
export async function optOutEndById(tx: Tx, accountId: string, id: string): Promise<OptOutRow | null> {
  const { rows } = await tx.query<OptOutRow>({
    name: 'opt_out_end_by_id',
    text: `UPDATE opt_outs SET deleted_at = clock_timestamp(), sequence = sequence + 1
            WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL
            RETURNING ${OPT_OUT_COLUMNS}`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

export async function optOutActive(db: Db, p: Pair): Promise<OptOutRow | null> {
  const { rows } = await db.query<OptOutRow>({
    name: 'opt_out_active',
    text: `SELECT ${OPT_OUT_COLUMNS} FROM opt_outs
            WHERE account_id = $1 AND number = $2 AND recipient = $3 AND deleted_at IS NULL`,
    values: [p.accountId, p.number, p.recipient],
  });
  return rows[0] ?? null;
}

/** Which of these pairs (one account's numbers and recipients) are opted out now, in one statement: as `pairOf` keys. */
export async function optOutsActive(
  db: Db,
  accountId: string,
  pairs: readonly Omit<Pair, 'accountId'>[],
): Promise<Set<string>> {
  if (pairs.length === 0) return new Set();
  const { rows } = await db.query<{ number: string; recipient: string }>({
    name: 'opt_outs_active',
    text: `SELECT o.number, o.recipient FROM opt_outs o
             JOIN unnest($2::text[], $3::text[]) AS p (number, recipient)
               ON o.number = p.number AND o.recipient = p.recipient
            WHERE o.account_id = $1 AND o.deleted_at IS NULL`,
    values: [accountId, pairs.map((p) => p.number), pairs.map((p) => p.recipient)],
  });
  return new Set(rows.map(pairOf));
}

/** A pair as one string, for sets of pairs. */
export const pairOf = (p: Omit<Pair, 'accountId'>) => `${p.number} ${p.recipient}`;

/** One of the account's active opt-outs. */
export async function optOutOfAccount(db: Db, accountId: string, id: string): Promise<OptOutRow | null> {
  const { rows } = await db.query<OptOutRow>({
    name: 'opt_out_of_account',
    text: `SELECT ${OPT_OUT_COLUMNS} FROM opt_outs WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

/** The account's active opt-outs, newest first, optionally for one number and/or one recipient. */
export async function optOutList(
  db: Db,
  accountId: string,
  filter: { number?: string | undefined; recipient?: string | undefined },
  limit: number,
  startingAfter: string | null,
): Promise<OptOutRow[]> {
  const { rows } = await db.query<OptOutRow>({
    name: 'opt_out_list',
    text: `SELECT ${OPT_OUT_COLUMNS} FROM opt_outs
            WHERE account_id = $1 AND deleted_at IS NULL
              AND ($2::text IS NULL OR number = $2) AND ($3::text IS NULL OR recipient = $3)
              AND ($4::text IS NULL OR id < $4)
            ORDER BY id DESC LIMIT $5`,
    values: [accountId, filter.number ?? null, filter.recipient ?? null, startingAfter, limit + 1],
  });
  return rows;
}
