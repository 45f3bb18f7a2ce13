// Verifying what Handset sends to your endpoint (Standard Webhooks): the
// webhook-id, a webhook-timestamp within five minutes and an HMAC-SHA256
// signature under your endpoint's secret (any of the space-separated ones, so a
// rotation's overlap verifies). `handset listen` verifies with it too.

import { createHmac, timingSafeEqual } from 'node:crypto';
import type { HandsetEvent } from './client.js';

/** How far a webhook-timestamp may be from now: older is a replay, newer a clock gone wrong. */
export const TOLERANCE_SECONDS = 300;

/** The three headers, as Node's IncomingHttpHeaders or a fetch Headers object gives them. */
export type WebhookHeaders = Record<string, string | string[] | undefined> | Headers;

export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';
}

/** Standard Webhooks' v1 signature: HMAC-SHA256 under the secret's bytes (base64 after `whsec_`). */
function sign(secret: string, id: string, timestamp: string, body: string): string {
  const key = Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}

const header = (headers: WebhookHeaders, name: string) => {
  const v = headers instanceof Headers ? headers.get(name) : headers[name];
  return typeof v === 'string' ? v : undefined;
};

/** Why a request is not a genuine webhook from Handset for this secret, or null when it is. */
export function verificationFailure(
  secret: string,
  headers: WebhookHeaders,
  body: string,
  nowSeconds = Math.floor(Date.now() / 1000),
): string | null {
  const id = header(headers, 'webhook-id');
  const ts = header(headers, 'webhook-timestamp');
  const sig = header(headers, 'webhook-signature');
  if (!id || !ts || !sig) return 'missing webhook headers';
  if (!/^\d+$/.test(ts) || Math.abs(nowSeconds - Number(ts)) > TOLERANCE_SECONDS) return 'timestamp out of tolerance';
  const expected = Buffer.from(sign(secret, id, ts, body));
  const match = sig.split(' ').some((s) => {
    const given = Buffer.from(s);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  return match ? null : 'no matching signature';
}

/**
 * The event in a webhook request, once verified: pass the raw body, exactly as
 * received (a re-serialised JSON does not verify). Deduplicate on `event.id`: a
 * redelivery carries the same one.
 */
export function constructEvent(
  secret: string,
  headers: WebhookHeaders,
  body: string,
  nowSeconds?: number,
): HandsetEvent {
  const failure = verificationFailure(secret, headers, body, nowSeconds);
  if (failure) throw new WebhookVerificationError(failure);
  return JSON.parse(body) as HandsetEvent;
}
