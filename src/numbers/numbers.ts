// Phone numbers an account owns, each at one carrier (unique per carrier). A
// number is how inbound SMS and calls find their account, names the carrier its
// messages and calls go out through, and may carry a ring plan for inbound calls.
// The resource, its schema and its release; the SQL is numbers.sql.ts.
//
// A claim (routes.ts) is checked with the carrier first: only a number in this
// deployment's carrier account can be added, and a number someone else holds is
// answered exactly as one the carrier does not know (no existence oracle).

import { Type } from 'typebox';
import { named } from '../api/fields.js';
import { callsLiveOnNumber } from '../calls/calls.sql.js';
import type { Tx } from '../db/tx.js';
import { messagesWaitingFrom } from '../messages/messages.sql.js';
import { numberDelete, numberLockOfAccount, type PhoneNumberRow } from './numbers.sql.js';

/** The Ajv format that checks a phone number is possible (phone.ts); the API's validator registers it. */
export const PHONE_FORMAT = 'phone';

/**
 * E.164: "+", country code, at most 15 digits, and a length its country uses.
 * Bad input answers 422 invalid_phone_number saying why (phone.ts).
 */
export const E164 = Type.String({
  pattern: '^\\+[1-9][0-9]{1,14}$',
  format: PHONE_FORMAT,
  'x-code': 'invalid_phone_number',
  description: 'E.164 phone number, e.g. +14155550100',
  examples: ['+14155550100'],
});

export const PhoneNumber = named(
  'PhoneNumber',
  Type.Object({
    id: Type.String(),
    number: E164,
    carrier: Type.String({ description: 'the carrier its messages and calls go through' }),
    tenant_id: Type.Union([Type.String(), Type.Null()]),
    inbound_ring: Type.Array(E164),
    ring_timeout_secs: Type.Integer(),
    record: Type.Boolean({ description: 'inbound calls are recorded once bridged' }),
    transcribe: Type.Boolean({ description: 'recorded inbound calls are transcribed when they end' }),
    mps: Type.Union([Type.Integer(), Type.Null()], {
      description: 'at most this many messages a second are sent from it, across all workers; null: no limit',
    }),
    created_at: Type.String({ format: 'date-time' }),
  }),
);

export function phoneNumberResource(n: PhoneNumberRow) {
  return {
    id: n.id,
    number: n.number,
    carrier: n.carrier,
    tenant_id: n.tenant_id,
    inbound_ring: n.inbound_ring,
    ring_timeout_secs: n.ring_timeout_secs,
    record: n.inbound_record,
    transcribe: n.inbound_transcribe,
    mps: n.mps,
    created_at: n.created_at.toISOString(),
  };
}

export type ReleaseResult =
  | { applied: true; number: PhoneNumberRow }
  | { applied: false; reason: 'not_found' }
  | { applied: false; reason: 'in_use'; calls: number; messages: number };

/**
 * Releases one of the account's numbers from it (the number stays in the carrier
 * account; another account may claim it next). Refused while a call on it still
 * rings or talks, or a message from it still waits to be sent: those need it.
 * The row is locked first, so a send or call taking the number meanwhile is
 * either counted here or finds it gone.
 */
export async function numberRelease(tx: Tx, accountId: string, id: string): Promise<ReleaseResult> {
  const number = await numberLockOfAccount(tx, accountId, id);
  if (!number) return { applied: false, reason: 'not_found' };
  const calls = await callsLiveOnNumber(tx, accountId, number.carrier, number.number);
  const messages = await messagesWaitingFrom(tx, accountId, number.carrier, number.number);
  if (calls > 0 || messages > 0) return { applied: false, reason: 'in_use', calls, messages };
  await numberDelete(tx, number.id);
  return { applied: true, number };
}
