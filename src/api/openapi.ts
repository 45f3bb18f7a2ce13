// The OpenAPI document's conventions, declared once so that every route follows
// them and a client generator gets names instead of shapes: schemas marked with
// `named` become components referenced by $ref, responses carry descriptions,
// and every /v1 route gets the problem+json responses it can give (those any
// route can give are added here; a route declares its own with `problems`).

import type { TSchema } from 'typebox';
import { COMPONENT_NAME } from './fields.js';
import { Problem } from './problem.js';

/** A success response with its description (a generator's doc comment; never "Default Response"). */
export const ok = <T extends TSchema>(description: string, schema: T) => ({
  description,
  content: { 'application/json': { schema } },
});

const PROBLEM_DESCRIPTIONS = {
  400: 'Malformed request: unparseable JSON, a bad Idempotency-Key, a value that cannot be stored',
  401: 'Missing, invalid or revoked API key',
  404: 'No such resource in this account (another account’s ids are 404 too)',
  409: 'Conflict with the resource’s current state; `code` says which',
  413: 'Request body too large',
  415: 'Send application/json',
  422: 'Invalid input; `param` names the field and `detail` says what is allowed',
  429: 'Too many requests; retry after Retry-After',
} as const;

export type ProblemStatus = keyof typeof PROBLEM_DESCRIPTIONS;

const problemResponse = (status: ProblemStatus) => ({
  description: PROBLEM_DESCRIPTIONS[status],
  content: { 'application/problem+json': { schema: Problem } },
});

/** The problem+json responses a route gives besides the ones every route can (see withStandardProblems). */
export function problems<S extends ProblemStatus>(...statuses: S[]) {
  return Object.fromEntries(statuses.map((s) => [s, problemResponse(s)])) as {
    [K in S]: ReturnType<typeof problemResponse>;
  };
}

interface RouteShape {
  method: string | string[];
  url: string;
  schema?: { response?: Record<string, unknown>; body?: unknown };
}

/**
 * Adds the 4xx any /v1 route can give: 400, 401, 422 and 429 always; 404 when the
 * path names a resource; 413 and 415 when the method takes a body. A route's own
 * declaration of the same status wins.
 */
export function withStandardProblems(route: RouteShape): void {
  if (!route.schema) return;
  const methods = ([] as string[]).concat(route.method);
  const statuses: ProblemStatus[] = [400, 401, 422, 429];
  if (route.url.includes(':')) statuses.push(404);
  if (methods.some((m) => m === 'POST' || m === 'PATCH' || m === 'PUT')) statuses.push(413, 415);
  route.schema.response = { ...problems(...statuses), ...(route.schema.response ?? {}) };
}

type Json = unknown;

/**
 * Compares copies of one schema by what they allow: the API's copy has passed
 * through @fastify/swagger, which writes `const: x` as `enum: [x]` (OpenAPI 3.0
 * has no const) and may order keys differently, while the webhooks section
 * keeps the original.
 */
function sameConstraint(_key: string, value: Json): Json {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return value;
  const entries = Object.entries(value as Record<string, Json>).map(([k, v]): [string, Json] =>
    k === 'const' ? ['enum', [v]] : [k, v],
  );
  return Object.fromEntries(entries.sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)));
}

/**
 * Moves every schema marked by `named` into components.schemas and puts a $ref
 * where it was. Two different schemas under one name are a mistake and throw,
 * so the document cannot quietly describe one of them wrongly.
 */
export function hoistComponents<D extends { components?: object }>(doc: D): D {
  const schemas: Record<string, Json> = { ...((doc.components as { schemas?: object } | undefined)?.schemas ?? {}) };
  const seen = new Map<string, string>();
  const walk = (node: Json): Json => {
    if (Array.isArray(node)) return node.map(walk);
    if (node === null || typeof node !== 'object') return node;
    const out: Record<string, Json> = {};
    for (const [k, v] of Object.entries(node)) if (k !== COMPONENT_NAME) out[k] = walk(v);
    const name = (node as Record<string, Json>)[COMPONENT_NAME];
    if (typeof name !== 'string') return out;
    // A query parameter's copy has lost its description to the parameter: compare without it.
    const { description, ...shape } = out;
    const text = JSON.stringify(shape, sameConstraint);
    const before = seen.get(name);
    if (before !== undefined && before !== text) throw new Error(`two different schemas are named ${name}`);
    seen.set(name, text);
    if (before === undefined || description !== undefined) schemas[name] = out;
    return { $ref: `#/components/schemas/${name}` };
  };
  const hoisted = walk(doc) as D;
  return { ...hoisted, components: { ...hoisted.components, schemas } };
}

interface Parameter {
  in?: string;
  required?: boolean;
  schema?: { default?: unknown };
}

/**
 * A query parameter with a default (a list's `limit`) is optional to the caller:
 * the API fills it in. The route's schema must still call it required, since
 * that is what the handler gets, and @fastify/swagger copies that over.
 */
export function optionalWhenDefaulted<D extends { paths?: object }>(doc: D): D {
  for (const item of Object.values(doc.paths ?? {}) as Record<string, { parameters?: Parameter[] }>[]) {
    for (const operation of Object.values(item)) {
      for (const p of operation.parameters ?? []) {
        if (p.in === 'query' && p.schema && 'default' in p.schema) p.required = false;
      }
    }
  }
  return doc;
}
