// A batch of messages in one request: its envelope (`{"messages":[…]}`, 1 to
// MAX_BATCH items) and the items the single create's schema refuses, each
// answered in its place with the very problem that create would give. The schema
// is the single create's own, checked by the API's own validator, so an item
// takes whatever POST /messages takes.

import type { FastifyRequest } from 'fastify';
import { type Static, type TSchema, Type } from 'typebox';
import { type AjvError, type Problem, unstorable, ValidationError, validationProblem } from '../api/problem.js';
import { MAX_BODY_CHARACTERS } from './messages.js';

export const MAX_BATCH = 1_000;

/**
 * The most a batch's body may weigh: MAX_BATCH items of the largest text (each
 * UTF-16 unit at most 3 bytes of UTF-8) with room for the rest of each item.
 */
export const BATCH_BODY_LIMIT = MAX_BATCH * (MAX_BODY_CHARACTERS * 3 + 2_048);

/** `{"messages":[…]}` of items; `items` is the single create's body (or anything, for the envelope alone). */
export const batchBody = <T extends TSchema>(items: T) =>
  Type.Object(
    {
      messages: Type.Array(items, {
        minItems: 1,
        maxItems: MAX_BATCH,
        'x-code': 'invalid_batch_size',
        description: `1 to ${MAX_BATCH.toLocaleString('en')} messages, each as the body of POST /v1/messages`,
      }),
    },
    { additionalProperties: false },
  );

const Envelope = batchBody(Type.Unknown());

export type BatchItem<T extends TSchema> = { input: Static<T> } | { problem: Problem };

interface Validate {
  (data: unknown): boolean;
  errors?: AjvError[] | null;
}

/**
 * The batch's items, each its input or the problem its schema found (or, for text
 * holding a NUL, the one the database's refusal gives a single create). Called on a
 * route declared with attachValidation: a refusal of anything but the body, or of
 * the envelope, is thrown as the route would have thrown it; when the body passed
 * whole (the usual case), the items are not checked again.
 */
export function validItems<T extends TSchema>(req: FastifyRequest, item: T): BatchItem<T>[] {
  const refused = req.validationError as (Error & { validationContext?: string }) | undefined;
  if (refused && refused.validationContext !== 'body') throw refused;
  const items = checked(req, item, refused !== undefined);
  // PostgreSQL stores no NUL in text: one such item would fail the whole transaction, so it is answered in its place.
  return items.map((i) => ('input' in i && holdsNul(i.input) ? { problem: unstorable() } : i));
}

/** Each item by the single create's schema; the envelope first. */
function checked<T extends TSchema>(req: FastifyRequest, item: T, refused: boolean): BatchItem<T>[] {
  if (refused) {
    const envelope = req.compileValidationSchema(Envelope, 'body') as Validate;
    if (!envelope(req.body)) throw new ValidationError(envelope.errors ?? [], 'body');
  }
  const body = req.body as { messages: unknown[] };
  if (!refused) return body.messages.map((input) => ({ input: input as Static<T> }));
  const one = req.compileValidationSchema(item, 'body') as Validate;
  return body.messages.map((input) =>
    one(input) ? { input: input as Static<T> } : { problem: validationProblem(one.errors ?? [], 'body') },
  );
}

const holdsNul = (v: unknown): boolean =>
  typeof v === 'string'
    ? v.includes('\0')
    : Array.isArray(v)
      ? v.some(holdsNul)
      : v !== null && typeof v === 'object' && Object.values(v).some(holdsNul);
