// Prefixed, time-ordered ids, the same as the database's handset_id(prefix):
// "cev_" + 12 hex of the millisecond + 16 hex of randomness. Made here when a
// statement needs a row's id before it inserts the row (a job payload built in
// TypeScript for a row inserted by the same statement).

import { randomFillSync } from 'node:crypto';

// Random bytes drawn a few kilobytes at a time: one call to the CSPRNG per id cost
// ingest more than the rest of building its batch (as crypto.randomUUID does, pooled).
const POOL = Buffer.alloc(8 * 512);
let used = POOL.length;

export function newId(prefix: string, now = Date.now()): string {
  if (used === POOL.length) {
    randomFillSync(POOL);
    used = 0;
  }
  const random = POOL.toString('hex', used, used + 8);
  used += 8;
  return `${prefix}_${now.toString(16).padStart(12, '0')}${random}`;
}
