// What the API accepts as input, beyond each route's schema: its own formats
// (strict date-times, possible phone numbers), no type coercion anywhere — a
// query string's integers are parsed here, explicitly, since a query string has
// no types — and text that is Unicode (a lone UTF-16 surrogate is refused, not
// stored as U+FFFD).

import { PHONE_FORMAT } from '../numbers/numbers.js';
import { isPossiblePhoneNumber } from '../numbers/phone.js';
import { ApiError } from './problem.js';

interface FormatRegistry {
  addFormat(name: string, format: { type: 'string'; validate: (s: string) => boolean }): unknown;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** Ajv's onCreate: registered after ajv-formats, so these win. */
export function addFormats(ajv: FormatRegistry): void {
  // RFC 3339 date-times that JavaScript can also read: a leap second (23:59:60) is refused by the schema, not a 500.
  ajv.addFormat('date-time', { type: 'string', validate: (s) => RFC3339.test(s) && !Number.isNaN(Date.parse(s)) });
  ajv.addFormat(PHONE_FORMAT, { type: 'string', validate: isPossiblePhoneNumber });
  ajv.addFormat(DAY_OR_INSTANT, { type: 'string', validate: (s) => instantOf(s, 'start') !== null });
}

/** A format for bounds of a period: an RFC 3339 date-time, or a day (YYYY-MM-DD, UTC). */
export const DAY_OR_INSTANT = 'date-or-date-time';
const DAY = /^(\d{4})-(\d{2})-(\d{2})$/;

/**
 * The instant a bound names: a date-time as it is; a day, its start (for `from`)
 * or its end, the start of the next day (for `to`), so a day given as both bounds is that whole day.
 */
export function instantOf(text: string, edge: 'start' | 'end'): Date | null {
  const day = DAY.exec(text);
  if (day) {
    const [y, m, d] = [Number(day[1]), Number(day[2]) - 1, Number(day[3])];
    const start = new Date(Date.UTC(y, m, d));
    if (start.getUTCFullYear() !== y || start.getUTCMonth() !== m || start.getUTCDate() !== d) return null;
    return edge === 'start' ? start : new Date(Date.UTC(y, m, d + 1));
  }
  return RFC3339.test(text) && !Number.isNaN(Date.parse(text)) ? new Date(text) : null;
}

/** A decimal integer as a query string spells it: no sign but minus, no exponent, no leading zeros, no spaces. */
const INTEGER = /^(0|-?[1-9][0-9]{0,14})$/;

/**
 * Turns the query values that the route's schema declares integers into numbers
 * when they are spelled as one; anything else is left as it came, for the schema
 * to refuse (a repeated parameter stays a list and is refused too).
 */
export function parseQueryIntegers(schema: unknown, query: unknown): void {
  const properties = (schema as { properties?: Record<string, { type?: unknown }> } | undefined)?.properties;
  if (!properties || !query || typeof query !== 'object') return;
  const q = query as Record<string, unknown>;
  for (const [name, property] of Object.entries(properties)) {
    const value = q[name];
    if (property.type === 'integer' && typeof value === 'string' && INTEGER.test(value)) q[name] = Number(value);
  }
}

/** Refuses a parsed JSON body holding a string that is not well-formed UTF-16, naming the field. */
export function refuseIllFormedText(body: unknown): void {
  const field = illFormedAt(body);
  if (field !== null) {
    throw new ApiError(
      422,
      'invalid_text',
      `${field || 'the body'}: holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape), which is not text`,
      field || undefined,
    );
  }
}

/** The path of the first string (or key) that is not well-formed; a loop, not recursion, for any depth of nesting. */
function illFormedAt(root: unknown): string | null {
  const pending: [unknown, string][] = [[root, '']];
  const at = (path: string, key: string | number) => (path ? `${path}.${key}` : String(key));
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [value, path] = next;
    if (typeof value === 'string') {
      if (!value.isWellFormed()) return path;
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) pending.push([value[i], at(path, i)]);
    } else if (value && typeof value === 'object') {
      const entries = Object.entries(value);
      for (const [k] of entries) if (!k.isWellFormed()) return path || k;
      for (let i = entries.length - 1; i >= 0; i--) pending.push([entries[i]![1], at(path, entries[i]![0])]);
    }
  }
  return null;
}
