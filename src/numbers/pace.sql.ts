// SQL for number_pace: the sending rate of numbers with an `mps`, shared by every
// worker process. Slots are taken on the database's clock, the one clock all
// processes share (their own are kept in step with it); a dispatcher waits for
// each slot it took before sending.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export interface PacedNumber {
  carrier: string;
  number: string;
  mps: number;
}

/** Of these (carrier, number) pairs, the ones with a sending rate, and the rate. */
export async function numbersPaced(
  tx: Tx,
  pairs: readonly { carrier: string; number: string }[],
): Promise<PacedNumber[]> {
  if (pairs.length === 0) return [];
  const { rows } = await tx.query<PacedNumber>({
    name: 'numbers_paced',
    text: `SELECT n.carrier, n.number, n.mps FROM phone_numbers n
             JOIN unnest($1::text[], $2::text[]) AS p (carrier, number) ON p.carrier = n.carrier AND p.number = n.number
            WHERE n.mps IS NOT NULL`,
    values: [pairs.map((p) => p.carrier), pairs.map((p) => p.number)],
  });
  return rows;
}

/**
 * Takes `k` consecutive slots of the number at `mps`: the first at the later of
 * now and where its pace stood, each 1/mps s after the one before. Returns the
 * first slot and the database's now.
 */
export async function paceTake(db: Db, n: PacedNumber, k: number): Promise<{ first: Date; now: Date }> {
  const { rows } = await db.query<{ first: Date; now: Date }>({
    name: 'pace_take',
    text: `WITH t AS (SELECT clock_timestamp() AS now)
           INSERT INTO number_pace AS p (carrier, number, next_at)
           SELECT $1, $2, t.now + make_interval(secs => $3::float8 / $4) FROM t
           ON CONFLICT (carrier, number) DO UPDATE
             SET next_at = greatest(p.next_at, clock_timestamp()) + make_interval(secs => $3::float8 / $4)
           RETURNING next_at - make_interval(secs => $3::float8 / $4) AS first, clock_timestamp() AS now`,
    values: [n.carrier, n.number, k, n.mps],
  });
  return rows[0]!;
}
