// Cursor pagination (Stripe-style): ?limit=1..100 (default 20) and
// ?starting_after=<id>; ids sort by creation time, newest first. A cursor must
// be an item of the same list (the caller's own): anything else is 404
// resource_missing, never a silent first page.

import { Type, type TProperties, type TSchema } from 'typebox';
import { ApiError } from './problem.js';

const listProperties = {
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
  starting_after: Type.Optional(
    Type.String({ maxLength: 64, description: 'id of the last item of the previous page' }),
  ),
};

export const ListQuery = Type.Object(listProperties, { additionalProperties: false });

/** A list query with filters of its own. */
export const listQuery = <P extends TProperties>(filters: P) =>
  Type.Object({ ...listProperties, ...filters }, { additionalProperties: false });

export const listOf = <T extends TSchema>(item: T) => Type.Object({ data: Type.Array(item), has_more: Type.Boolean() });

/** Rows were fetched with LIMIT limit+1; the extra row only says there is more. */
export function page<T>(rows: T[], limit: number): { data: T[]; has_more: boolean } {
  return { data: rows.slice(0, limit), has_more: rows.length > limit };
}

/**
 * The cursor to page after, once `find` (the list's own lookup, scoped to the
 * caller) has found it; null without one.
 */
export async function cursorOf(
  startingAfter: string | undefined,
  find: (id: string) => Promise<unknown>,
): Promise<string | null> {
  if (startingAfter === undefined) return null;
  if (!(await find(startingAfter))) {
    throw new ApiError(404, 'resource_missing', 'starting_after: no such item in this list', 'starting_after');
  }
  return startingAfter;
}
