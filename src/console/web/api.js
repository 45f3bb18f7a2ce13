// The console's only way to Handset's data: the public /v1 API through the typed
// client, with the tab's API key, never cached by the browser. A failed request throws ApiError carrying the
// problem+json `detail`, which pages show as it is.

import createFetchClient from 'openapi-fetch';
import { apiKey, signOut } from './session.js';

export class ApiError extends Error {
  /** @param {number} status @param {{ detail?: string, title?: string, code?: string }} problem */
  constructor(status, problem) {
    super(problem.detail ?? problem.title ?? `HTTP ${status}`);
    this.status = status;
    this.code = problem.code ?? null;
  }
}

/** @typedef {import('@handset/client').paths} Paths */
/** @typedef {import('@handset/client').EventType} EventType */

/**
 * The typed client, over the same generated types as `@handset/client`: a path,
 * parameter or body the API does not take fails `npm run typecheck`. Every
 * request carries the tab's key (unless it brings its own) and skips the cache.
 * @type {import('openapi-fetch').Client<Paths>}
 */
export const client = createFetchClient({ baseUrl: location.origin, cache: 'no-store', credentials: 'omit' });
client.use({
  onRequest({ request }) {
    const key = apiKey();
    if (key && !request.headers.has('authorization')) request.headers.set('authorization', `Bearer ${key}`);
    return request;
  },
});

/**
 * What a request with the tab's key answered, or an ApiError with its problem's
 * detail; a 401 signs the tab out (the key was revoked or expired).
 * @template T
 * @param {Promise<{ data?: T, error?: any, response: Response }>} pending
 * @returns {Promise<T>}
 */
export async function answer(pending) {
  /** @type {{ data?: T, error?: any, response: Response }} */
  let result;
  try {
    result = await pending;
  } catch (err) {
    if (/** @type {Error} */ (err).name === 'AbortError') throw err;
    throw new ApiError(0, { detail: 'Handset did not answer. Is it still running?' });
  }
  const { response } = result;
  if (!response.ok) {
    if (response.status === 401) signOut('Your API key is no longer accepted. Sign in again.');
    const problem = result.error;
    throw new ApiError(
      response.status,
      problem && typeof problem === 'object' ? problem : { detail: `Handset answered HTTP ${response.status}` },
    );
  }
  return /** @type {T} */ (result.data);
}

/**
 * Whether this key opens the API (signing in): a 401 here says so and signs nobody out.
 * @param {string} key
 */
export async function tryKey(key) {
  const tried = await client
    .GET('/v1/messages', { params: { query: { limit: 1 } }, headers: { authorization: `Bearer ${key}` } })
    .catch((err) => Promise.reject(new ApiError(0, { detail: `Handset did not answer (${err.message}).` })));
  if (!tried.response.ok) {
    throw new ApiError(
      tried.response.status,
      tried.error ?? { detail: `Handset answered HTTP ${tried.response.status}` },
    );
  }
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
  openapi ??= fetch('/openapi.json', { cache: 'no-store' })
    .then((res) => (res.ok ? res.json() : Promise.reject(new ApiError(res.status, {}))))
    .catch((err) => {
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
