// Phone numbers an account owns, each at one carrier (unique per carrier). A
// number is how inbound SMS and calls find their account, names the carrier its
// messages and calls go out through, and may carry a ring plan for inbound calls.
// The resource and its schema; the SQL is numbers.sql.ts.

import { Type } from 'typebox';
import { named } from '../api/fields.js';
import type { PhoneNumberRow } from './numbers.sql.js';

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
    created_at: n.created_at.toISOString(),
  };
}
