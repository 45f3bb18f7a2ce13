// Idempotency-Key on POST creates (Stripe / IETF draft semantics): the first
// request's response is stored in the SAME transaction as the resource it
// created, so a crash can never leave a key without its resource or the reverse.
// Same key + same body → the stored response, replayed. Same key + another body
// → 422. Same key while the first is still running → 409 (a transaction-scoped
// advisory lock, released at commit or rollback). Keys are kept at least 24 h.

import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { Type } from 'typebox';
import { withTx, type Tx } from '../db/tx.js';
import { idempotencyKeyFind, idempotencyKeyStore, idempotencyKeyTryLock } from './idempotency.sql.js';
import { ApiError } from './problem.js';

/** The header a create honours, declared on its route so the OpenAPI document shows it. */
export const IdempotencyHeaders = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      description:
        '1-255 visible ASCII characters. The same key with the same body replays the first response; ' +
        'with another body 422; while the first is in flight 409. Kept at least 24 h.',
    }),
  ),
});

export interface Created {
  status: number;
  body: unknown;
}

export async function createIdempotently(
  pool: pg.Pool,
  req: FastifyRequest,
  accountId: string,
  work: (tx: Tx) => Promise<Created>,
): Promise<Created & { replayed: boolean }> {
  const header = req.headers['idempotency-key'];
  if (header === undefined) return { ...(await withTx(pool, work)), replayed: false };
  if (typeof header !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(header)) {
    throw new ApiError(400, 'invalid_idempotency_key', 'Idempotency-Key must be 1-255 visible ASCII characters');
  }
  const fingerprint = createHash('sha256')
    .update(`${req.method} ${req.url.split('?')[0]}\n${stableStringify(req.body ?? null)}`)
    .digest('hex');

  return withTx(pool, async (tx) => {
    if (!(await idempotencyKeyTryLock(tx, accountId, header))) {
      throw new ApiError(409, 'idempotency_key_in_use', 'A request with this Idempotency-Key is still being processed');
    }
    const stored = await idempotencyKeyFind(tx, accountId, header);
    if (stored) {
      if (stored.request_hash !== fingerprint) {
        throw new ApiError(422, 'idempotency_key_reused', 'This Idempotency-Key was used with a different request');
      }
      return { status: stored.response_status, body: stored.response_body, replayed: true };
    }
    const created = await work(tx);
    await idempotencyKeyStore(tx, accountId, header, { requestHash: fingerprint, ...created });
    return { ...created, replayed: false };
  });
}

// The same JSON with keys in another order is the same request.
function stableStringify(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableStringify).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.keys(value as object)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${stableStringify((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value);
}

export function sendCreated(reply: FastifyReply, created: Created & { replayed: boolean }): FastifyReply {
  if (created.replayed) reply.header('idempotent-replayed', 'true');
  return reply.code(created.status).send(created.body);
}
