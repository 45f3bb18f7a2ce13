// Prefixed, time-ordered ids, the same as the database's handset_id(prefix):
// "cev_" + 12 hex of the millisecond + 16 hex of randomness. Made here when a
// statement needs a row's id before it inserts the row (a job payload built in
// TypeScript for a row inserted by the same statement).
//
// The randomness is drawn from the CSPRNG a few kilobytes at a time, as Node does
// for randomUUID: one randomBytes call per id was a few percent of ingest's CPU.

import { randomBytes } from 'node:crypto';

const POOL_BYTES = 4096;
const ID_BYTES = 8;
let pool = Buffer.alloc(0);
let offset = 0;

export function newId(prefix: string, now = Date.now()): string {
  if (offset + ID_BYTES > pool.length) {
    pool = randomBytes(POOL_BYTES);
    offset = 0;
  }
  const random = pool.toString('hex', offset, offset + ID_BYTES);
  offset += ID_BYTES;
  return `${prefix}_${now.toString(16).padStart(12, '0')}${random}`;
}
