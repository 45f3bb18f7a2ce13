// The console's only way to Handset's data: the public /v1 API, with the tab's API
// key, never cached by the browser. A failed request throws ApiError carrying the
// problem+json `detail`, which pages show as it is.

import { apiKey, signOut } from './session.js';

export class ApiError extends Error {
  /** @param {number} status @param {{ detail?: string, title?: string, code?: string }} problem */
  constructor(status, problem) {
    super(problem.detail ?? problem.title ?? `HTTP ${status}`);
    this.status = status;
    this.code = problem.code ?? null;
  }
}

/**
 * @param {string} path
 * @param {{ method?: string, body?: unknown, key?: string, idempotencyKey?: string, signal?: AbortSignal }} [opts]
 *   `key`: try this key instead of the tab's (signing in); a 401 then does not sign out.
 * @returns {Promise<any>}
 */
export async function api(path, opts = {}) {
  const key = opts.key ?? apiKey();
  /** @type {Record<string, string>} */
  const headers = { accept: 'application/json' };
  if (key) headers['authorization'] = `Bearer ${key}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  if (opts.idempotencyKey) headers['idempotency-key'] = opts.idempotencyKey;
  /** @type {Response} */
  let res;
  try {
    res = await fetch(path, {
      method: opts.method ?? 'GET',
      headers,
      body: opts.body === undefined ? null : JSON.stringify(opts.body),
      cache: 'no-store',
      credentials: 'omit',
      signal: opts.signal ?? null,
    });
  } catch (err) {
    if (opts.signal?.aborted) throw err;
    throw new ApiError(0, { detail: 'Handset did not answer. Is it still running?' });
  }
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) {
    if (res.status === 401 && opts.key === undefined) signOut('Your API key is no longer accepted. Sign in again.');
    throw new ApiError(
      res.status,
      json && typeof json === 'object' ? json : { detail: `Handset answered HTTP ${res.status}` },
    );
  }
  return json;
}

/**
 * A query string from the parameters that have a value ('' and null are left out).
 * @param {Record<string, string | number | null | undefined>} params
 */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** A fresh Idempotency-Key, made once per form so a double submit creates one resource. */
export const idempotencyKey = () => crypto.randomUUID();

/** @type {Promise<any> | null} */
let openapi = null;

/**
 * The values the API accepts for a query parameter, read from its OpenAPI
 * document, so the console's filters list exactly what the API does.
 * @param {string} path e.g. '/v1/events' @param {string} name e.g. 'type'
 * @returns {Promise<string[]>}
 */
export async function enumOf(path, name) {
  openapi ??= api('/openapi.json').catch((err) => {
    openapi = null;
    throw err;
  });
  const doc = await openapi;
  const param = (doc.paths?.[path]?.get?.parameters ?? []).find((/** @type {{ name: string }} */ p) => p.name === name);
  // A named list (a status, an event type) is a component the parameter refers to.
  const ref = param?.schema?.$ref;
  const schema = ref ? doc.components?.schemas?.[String(ref).split('/').pop() ?? ''] : param?.schema;
  return schema?.enum ?? [];
}
