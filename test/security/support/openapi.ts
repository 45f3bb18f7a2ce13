// Requests generated from the API's own OpenAPI document (/openapi.json, built by
// @fastify/swagger from the TypeBox route schemas): the operations, and
// fast-check arbitraries per parameter and body schema — values the schema
// accepts, values it must refuse (wrong types, out of range, oversized, unknown
// fields), and values that are valid to the schema but hostile to what lies
// behind it (NUL, lone surrogates, leap seconds, SQL and path fragments).

import fc from 'fast-check';

/* eslint-disable @typescript-eslint/no-explicit-any */
export type Schema = Record<string, any>;

export interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required: boolean;
  schema: Schema;
}

export interface Operation {
  method: string;
  /** OpenAPI path, e.g. /v1/messages/{id} */
  path: string;
  parameters: Parameter[];
  body: Schema | null;
  responses: Record<string, Schema>;
}

/**
 * The schema with every local `$ref` replaced by what it points at, so a body the
 * API shares between routes (a batch's items are the single create's body) is
 * checked field by field like any other.
 */
function dereferenced(doc: Record<string, any>, schema: unknown, seen: readonly string[] = []): any {
  if (Array.isArray(schema)) return schema.map((s) => dereferenced(doc, s, seen));
  if (!schema || typeof schema !== 'object') return schema;
  const ref = (schema as { $ref?: unknown }).$ref;
  if (typeof ref === 'string' && ref.startsWith('#/')) {
    if (seen.includes(ref)) throw new Error(`a schema refers to itself: ${[...seen, ref].join(' → ')}`);
    const target = ref
      .slice(2)
      .split('/')
      .reduce<any>((node, key) => node?.[key.replace(/~1/g, '/').replace(/~0/g, '~')], doc);
    if (target === undefined) throw new Error(`${ref} points at nothing`);
    return dereferenced(doc, target, [...seen, ref]);
  }
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, dereferenced(doc, v, seen)]));
}

export function operationsOf(doc: { paths: Record<string, Record<string, any>> }): Operation[] {
  doc = dereferenced(doc, doc);
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      ops.push({
        method: method.toUpperCase(),
        path,
        parameters: (op.parameters ?? []) as Parameter[],
        body: op.requestBody?.content?.['application/json']?.schema ?? null,
        responses: Object.fromEntries(
          Object.entries((op.responses ?? {}) as Record<string, any>).map(([code, r]) => [
            code,
            r?.content?.['application/json']?.schema ?? {},
          ]),
        ),
      });
    }
  }
  return ops;
}

export const pathParams = (path: string) => [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);

/** A list operation answers {data: [...], has_more}. */
export const isList = (op: Operation) =>
  op.method === 'GET' &&
  op.responses['200']?.properties?.data?.type === 'array' &&
  op.responses['200']?.properties?.has_more !== undefined;

// ---------------------------------------------------------------------------
// Encoding

/** Percent-encodes every byte of the UTF-8 form that is not unreserved (lone surrogates become U+FFFD, as any client would send). */
export function pct(s: string): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9\-._~]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** A path or query segment as it goes on the wire: encoded, or raw (already-encoded or broken escapes). */
export type Segment = { raw: string } | { text: string };
export const wire = (s: Segment) => ('raw' in s ? s.raw : pct(s.text));

// ---------------------------------------------------------------------------
// Arbitraries

export interface Hints {
  /** Values to offer for a property or parameter of this name (own numbers, real ids, reachable URLs). */
  byName: Record<string, unknown[]>;
}

const E164 = '^\\+[1-9][0-9]{1,14}$';

/** Strings the schema may accept but the layers behind it may not. */
export const HOSTILE_STRINGS = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\ud800',
  'x\udfff',
  '\u202e\u2066',
  '💥'.repeat(40),
  "' OR 1=1 --",
  '"; DROP TABLE messages; --',
  '../../etc/passwd',
  '%00',
  '%',
  '$' + '{7*7}',
  '{{7*7}}',
  '<script>alert(1)</script>',
  'null',
  'undefined',
  '__proto__',
  'constructor',
  'NaN',
  '\\',
  '\\u0000',
  '\r\n',
  'ǅ̸̢̛͍̟͔̯̩',
  'ﷺ'.repeat(30),
  '\ufeff',
  '\u00a0',
  'msg_',
  'acct_00000000000000000000000000000',
  '+14155550100',
];

/** date-time strings RFC 3339 (and so Ajv's format) accepts, including the odd ones Date cannot read. */
const ODD_VALID_DATES = [
  '2024-06-30T23:59:60Z', // a leap second
  '2016-12-31T23:59:60+00:00',
  '2024-01-01t00:00:00z',
  '0000-01-01T00:00:00Z',
  '9999-12-31T23:59:59Z',
  '2024-01-01T00:00:00.123456789012345Z',
  '2024-01-01T00:00:00+23:59',
  '2024-01-01T00:00:00-23:59',
];
const INVALID_DATES = [
  '2024-02-30T00:00:00Z',
  '2024-13-01T00:00:00Z',
  '2024-01-01',
  '2024-01-01T24:00:00Z',
  'now',
  '',
  'yesterday',
  '1e9',
  '-0001-01-01T00:00:00Z',
  '+275760-09-13T00:00:00Z',
  '2024-01-01T00:00:00+24:00',
  '2024-01-01 00:00:00Z',
];

export function dateTime(): fc.Arbitrary<string> {
  const day = 86_400_000;
  return fc.oneof(
    {
      arbitrary: fc.integer({ min: -40 * day, max: 40 * day }).map((ms) => new Date(Date.now() + ms).toISOString()),
      weight: 4,
    },
    {
      arbitrary: fc
        .date({ min: new Date('0001-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59Z'), noInvalidDate: true })
        .map((d) => d.toISOString()),
      weight: 2,
    },
    { arbitrary: fc.constantFrom(...ODD_VALID_DATES), weight: 1 },
  );
}

/** A value the schema accepts (or, for patterns, very nearly: fc.stringMatching is exact). */
export function valid(schema: Schema, hints: Hints, name?: string): fc.Arbitrary<unknown> {
  const hinted = name !== undefined ? hints.byName[name] : undefined;
  const own = valid_(schema, hints);
  return hinted && hinted.length > 0
    ? fc.oneof({ arbitrary: fc.constantFrom(...hinted), weight: 2 }, { arbitrary: own, weight: 1 })
    : own;
}

function valid_(schema: Schema, hints: Hints): fc.Arbitrary<unknown> {
  if (Array.isArray(schema['enum'])) return fc.constantFrom(...(schema['enum'] as unknown[]));
  if ('const' in schema) return fc.constant(schema['const']);
  const alternatives = (schema['anyOf'] ?? schema['oneOf']) as Schema[] | undefined;
  if (alternatives) return fc.oneof(...alternatives.map((s) => valid_(s, hints)));
  switch (schema['type']) {
    case 'string': {
      if (schema['format'] === 'date-time') return dateTime();
      const max = Math.min(schema['maxLength'] ?? 60, 60);
      if (schema['pattern'] === E164) return fc.stringMatching(/^\+[1-9][0-9]{6,14}$/);
      if (schema['pattern'])
        return fc
          .stringMatching(new RegExp(schema['pattern'] as string))
          .filter((s) => s.length <= (schema['maxLength'] ?? Infinity));
      return fc.string({
        unit: 'grapheme',
        minLength: schema['minLength'] ?? 0,
        maxLength: Math.max(max, schema['minLength'] ?? 0),
      });
    }
    case 'integer':
      return fc.integer({ min: schema['minimum'] ?? -1_000_000, max: schema['maximum'] ?? 1_000_000 });
    case 'number':
      return fc.double({ min: schema['minimum'] ?? -1e6, max: schema['maximum'] ?? 1e6, noNaN: true });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array': {
      const item = valid_((schema['items'] ?? {}) as Schema, hints);
      const constraints = { minLength: schema['minItems'] ?? 0, maxLength: Math.min(schema['maxItems'] ?? 4, 4) };
      return schema['uniqueItems']
        ? fc.uniqueArray(item, { ...constraints, selector: (v) => JSON.stringify(v) })
        : fc.array(item, constraints);
    }
    case 'object':
      return objectOf(schema, hints, 'valid');
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

/** A value the schema should refuse, or that it accepts but is hostile to what lies behind it. */
export function hostile(schema: Schema, hints: Hints): fc.Arbitrary<unknown> {
  const wrongType = fc.oneof(
    fc.integer(),
    fc.double(),
    fc.boolean(),
    fc.constant(null),
    fc.array(fc.string(), { maxLength: 3 }),
    fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 }), { maxKeys: 3 }),
    fc.string({ maxLength: 10 }),
  );
  const type = schema['type'] ?? (schema['anyOf'] ? 'string' : schema['enum'] ? 'enum' : 'any');
  const max = (schema['maxLength'] as number | undefined) ?? 64;
  switch (type) {
    case 'string':
    case 'enum':
      return fc.oneof(
        wrongType,
        fc.constantFrom(...HOSTILE_STRINGS),
        fc.integer({ min: 1, max: 40 }).map((n) => 'x'.repeat(max + n)),
        fc.constantFrom(max + 1, max * 10, 70_000).map((n) => 'é'.repeat(n)),
        fc.string({ unit: 'binary', maxLength: 30 }),
        fc.constantFrom(...INVALID_DATES, ...ODD_VALID_DATES),
        ...(Array.isArray(schema['enum'])
          ? [
              fc.constantFrom(
                ...(schema['enum'] as string[]).flatMap((e) => [e.toUpperCase(), ` ${e}`, `${e}\u0000`, `${e},${e}`]),
              ),
            ]
          : []),
      );
    case 'integer':
    case 'number':
      return fc.oneof(
        wrongType,
        fc.constantFrom(
          -1,
          0,
          4,
          121,
          1.5,
          -0,
          2 ** 31,
          -(2 ** 31) - 1,
          2 ** 53 + 1,
          1e308,
          -1e308,
          5e-324,
          '20',
          ' 20 ',
          '1e3',
          '0x10',
          '',
          '20abc',
        ),
        fc.integer().filter((n) => n < (schema['minimum'] ?? -Infinity) || n > (schema['maximum'] ?? Infinity)),
      );
    case 'boolean':
      return fc.oneof(wrongType, fc.constantFrom('true', 'false', 1, 0, 'yes', '', null));
    case 'array':
      return fc.oneof(
        wrongType,
        fc.array(hostile((schema['items'] ?? {}) as Schema, hints), { minLength: 1, maxLength: 3 }),
        fc
          .constantFrom((schema['maxItems'] ?? 10) + 1, 1000, 20_000)
          .chain((n) => valid_((schema['items'] ?? {}) as Schema, hints).map((v) => Array(n).fill(v))),
        fc.constant([[[[[]]]]]),
      );
    case 'object':
      return fc.oneof(wrongType, objectOf(schema, hints, 'hostile'));
    default:
      return wrongType;
  }
}

const UNKNOWN_KEYS = [
  'colour',
  '__proto__',
  'constructor',
  'prototype',
  'id',
  'account_id',
  'status',
  'secret',
  'created_at',
  '',
  ' ',
  'a'.repeat(300),
  '\u0000',
];

/**
 * An object for an object schema. 'valid': every property valid, optional ones
 * sometimes absent. 'hostile': the same, but some properties hostile, a required
 * one sometimes missing, an unknown one sometimes added.
 */
export function objectOf(
  schema: Schema,
  hints: Hints,
  mode: 'valid' | 'hostile',
): fc.Arbitrary<Record<string, unknown>> {
  const props = (schema['properties'] ?? {}) as Record<string, Schema>;
  const required = new Set<string>((schema['required'] ?? []) as string[]);
  const names = Object.keys(props);
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const n of names) {
    model[n] =
      mode === 'valid'
        ? valid(props[n]!, hints, n)
        : fc.oneof(
            { arbitrary: valid(props[n]!, hints, n), weight: 2 },
            { arbitrary: hostile(props[n]!, hints), weight: 1 },
          );
  }
  let arb: fc.Arbitrary<Record<string, unknown>> = fc.record(model, {
    requiredKeys: names.filter((n) => required.has(n)),
  }) as fc.Arbitrary<Record<string, unknown>>;
  const minProperties = (schema['minProperties'] as number | undefined) ?? 0;
  if (mode === 'valid' && minProperties > 0) arb = arb.filter((o) => Object.keys(o).length >= minProperties);
  if (mode === 'hostile') {
    arb = fc
      .tuple(
        arb,
        required.size > 0 ? fc.option(fc.constantFrom(...required), { freq: 4 }) : fc.constant(null),
        fc.option(fc.tuple(fc.constantFrom(...UNKNOWN_KEYS), fc.jsonValue({ maxDepth: 1 })), { freq: 3 }),
      )
      .map(([o, drop, extra]) => {
        const copy: Record<string, unknown> = { ...o };
        if (drop !== null) delete copy[drop];
        if (extra !== null)
          Object.defineProperty(copy, extra[0], {
            value: extra[1],
            enumerable: true,
            writable: true,
            configurable: true,
          });
        return copy;
      });
  }
  return arb;
}

/** A raw body for a JSON operation: broken JSON, other media types, prototype pollution, depth, size. */
export const rawBodies = fc.constantFrom<{ text: string; contentType: string | null }>(
  { text: '{"a":', contentType: 'application/json' },
  { text: '', contentType: 'application/json' },
  { text: 'null', contentType: 'application/json' },
  { text: '[]', contentType: 'application/json' },
  { text: '"x"', contentType: 'application/json' },
  { text: '1e999999', contentType: 'application/json' },
  { text: '{"__proto__":{"admin":true}}', contentType: 'application/json' },
  { text: '{"constructor":{"prototype":{"admin":true}}}', contentType: 'application/json' },
  { text: '\ufeff{}', contentType: 'application/json' },
  { text: '{}', contentType: 'text/plain' },
  { text: '{}', contentType: 'application/x-www-form-urlencoded' },
  { text: 'a=1&b=2', contentType: 'application/x-www-form-urlencoded' },
  { text: '{}', contentType: 'application/json; charset=utf-16' },
  { text: '{}', contentType: 'application/json; charset=latin1' },
  { text: '{}', contentType: '' },
  { text: '{}', contentType: ';;;' },
  { text: '{}', contentType: null },
  { text: '{}', contentType: 'APPLICATION/JSON' },
  { text: '{}', contentType: 'application/merge-patch+json' },
  { text: '['.repeat(100_000) + ']'.repeat(100_000), contentType: 'application/json' },
  { text: `{"a":${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}}`, contentType: 'application/json' },
  { text: JSON.stringify({ x: 'y'.repeat(300 * 1024) }), contentType: 'application/json' },
  { text: `{${Array.from({ length: 20_000 }, (_, i) => `"k${i}":${i}`).join(',')}}`, contentType: 'application/json' },
);

/**
 * One small value the schema accepts (its first example, enum value, default or
 * minimum), for requests that must be valid. `full`: objects get their optional
 * properties too (top level only).
 */
export function exampleOf(schema: Schema, name?: string, full = false): unknown {
  if (Array.isArray(schema['examples']) && schema['examples'].length > 0) return schema['examples'][0];
  if (Array.isArray(schema['enum'])) return schema['enum'][0];
  const alternatives = (schema['anyOf'] ?? schema['oneOf']) as Schema[] | undefined;
  if (alternatives) return exampleOf(alternatives[0]!, name);
  switch (schema['type']) {
    case 'string':
      if (schema['format'] === 'date-time') return new Date(Date.now() + 86_400_000).toISOString();
      if (name === 'url') return 'https://example.com/hooks';
      return 'x'.repeat(Math.max(1, (schema['minLength'] as number | undefined) ?? 1));
    case 'integer':
    case 'number':
      return schema['default'] ?? schema['minimum'] ?? 1;
    case 'boolean':
      return false;
    case 'array':
      return Array.from({ length: (schema['minItems'] as number | undefined) ?? 0 }, () =>
        exampleOf((schema['items'] ?? {}) as Schema),
      );
    case 'object': {
      const props = (schema['properties'] ?? {}) as Record<string, Schema>;
      const out: Record<string, unknown> = {};
      for (const k of (schema['required'] ?? []) as string[]) out[k] = exampleOf(props[k]!, k);
      for (const k of Object.keys(props)) {
        if (!full && Object.keys(out).length >= ((schema['minProperties'] as number | undefined) ?? 0)) break;
        out[k] = exampleOf(props[k]!, k);
      }
      return out;
    }
    default:
      return null;
  }
}
