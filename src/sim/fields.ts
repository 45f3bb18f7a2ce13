// Reading the fields of a Telnyx request body (REST or control API): the checks
// messaging and calls share, each answering with the refusal Telnyx would give.

import { refuse, type Refusal } from './refusals.js';

const E164 = /^\+[1-9]\d{1,14}$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export type Body = Record<string, unknown>;

export function isE164(value: unknown): value is string {
  return typeof value === 'string' && E164.test(value);
}

export function isBody(value: unknown): value is Body {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function isBlank(value: unknown): boolean {
  return value === undefined || value === null || (typeof value === 'string' && value.trim() === '');
}

/** An optional http(s) URL; null and absent read as null. */
export function optionalUrl(body: Body, param: string): string | null | Refusal {
  const v = body[param];
  if (v === undefined || v === null || v === '') return null;
  if (typeof v !== 'string') return refuse.badParameter(param, `'${param}' must be a URL string.`);
  try {
    const u = new URL(v);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme');
  } catch {
    return refuse.badParameter(param, `'${param}' must be an http or https URL.`);
  }
  return v;
}

/** client_state "must be a valid Base-64 encoded string"; echoed byte for byte. */
export function optionalClientState(body: Body): string | null | Refusal {
  const v = body['client_state'];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string' || v === '' || !BASE64.test(v)) {
    return refuse.badParameter('client_state', 'client_state must be a valid Base-64 encoded string.');
  }
  return v;
}

export function optionalString(body: Body, param: string): string | null | Refusal {
  const v = body[param];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') return refuse.badParameter(param, `'${param}' must be a string.`);
  return v;
}

export function isRefusal(v: unknown): v is Refusal {
  return isBody(v) && v['ok'] === false;
}

/** A bad request to the control API or the programmatic API (not a Telnyx REST refusal). */
export class SimInputError extends Error {
  override name = 'SimInputError';
}
