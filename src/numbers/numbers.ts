// Phone numbers an account owns (E.164, unique across all accounts). A number is
// how inbound SMS and calls find their account, and may carry a ring plan for
// inbound calls. Owns phone_numbers.

import { Type } from 'typebox';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

/** E.164: "+", country code, at most 15 digits. Bad input answers 422 invalid_phone_number. */
export const E164 = Type.String({
  pattern: '^\\+[1-9][0-9]{1,14}$',
  'x-code': 'invalid_phone_number',
  description: 'E.164 phone number, e.g. +14155550100',
  examples: ['+14155550100'],
});

export const isE164 = (s: string) => /^\+[1-9][0-9]{1,14}$/.test(s);

export interface PhoneNumberRow {
  id: string;
  account_id: string;
  tenant_id: string | null;
  number: string;
  inbound_ring: string[];
  ring_timeout_secs: number;
  created_at: Date;
}

export const PhoneNumber = Type.Object(
  {
    id: Type.String(),
    number: E164,
    tenant_id: Type.Union([Type.String(), Type.Null()]),
    inbound_ring: Type.Array(E164),
    ring_timeout_secs: Type.Integer(),
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'PhoneNumber' },
);

export function phoneNumberResource(n: PhoneNumberRow) {
  return {
    id: n.id,
    number: n.number,
    tenant_id: n.tenant_id,
    inbound_ring: n.inbound_ring,
    ring_timeout_secs: n.ring_timeout_secs,
    created_at: n.created_at.toISOString(),
  };
}

export async function numberCreate(
  tx: Tx,
  n: { accountId: string; tenantId: string | null; number: string; inboundRing: string[]; ringTimeoutSecs: number },
): Promise<PhoneNumberRow | null> {
  const { rows } = await tx.query<PhoneNumberRow>(
    `INSERT INTO phone_numbers (account_id, tenant_id, number, inbound_ring, ring_timeout_secs)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (number) DO NOTHING
     RETURNING *`,
    [n.accountId, n.tenantId, n.number, n.inboundRing, n.ringTimeoutSecs],
  );
  return rows[0] ?? null;
}

export async function numberList(
  db: Db,
  accountId: string,
  limit: number,
  startingAfter: string | null,
): Promise<PhoneNumberRow[]> {
  const { rows } = await db.query<PhoneNumberRow>(
    `SELECT * FROM phone_numbers WHERE account_id = $1 AND ($2::text IS NULL OR id < $2)
      ORDER BY id DESC LIMIT $3`,
    [accountId, startingAfter, limit + 1],
  );
  return rows;
}

export async function numberGet(db: Db, accountId: string, id: string): Promise<PhoneNumberRow | null> {
  const { rows } = await db.query<PhoneNumberRow>('SELECT * FROM phone_numbers WHERE id = $1 AND account_id = $2', [
    id,
    accountId,
  ]);
  return rows[0] ?? null;
}

/** The number a carrier event is addressed to, whoever owns it (routing). */
export async function numberByE164(db: Db, number: string): Promise<PhoneNumberRow | null> {
  const { rows } = await db.query<PhoneNumberRow>({
    name: 'number_by_e164',
    text: 'SELECT * FROM phone_numbers WHERE number = $1',
    values: [number],
  });
  return rows[0] ?? null;
}

/** An account's own number, or null when the account does not own it. */
export async function numberOwned(db: Db, accountId: string, number: string): Promise<PhoneNumberRow | null> {
  const { rows } = await db.query<PhoneNumberRow>({
    name: 'number_owned',
    text: 'SELECT * FROM phone_numbers WHERE number = $1 AND account_id = $2',
    values: [number, accountId],
  });
  return rows[0] ?? null;
}
