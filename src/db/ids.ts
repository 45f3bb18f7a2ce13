// Prefixed, time-ordered ids, the same as the database's handset_id(prefix):
// "cev_" + 12 hex of the millisecond + 16 hex of randomness. Made here when a
// statement needs a row's id before it inserts the row (a job payload built in
// TypeScript for a row inserted by the same statement).

import { randomBytes } from 'node:crypto';

export function newId(prefix: string, now = Date.now()): string {
  return `${prefix}_${now.toString(16).padStart(12, '0')}${randomBytes(8).toString('hex')}`;
}
