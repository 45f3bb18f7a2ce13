// One HTTP attempt of a delivery, signed with every secret the endpoint signs
// with now: no database connection is held while it runs. An endpoint that is
// timing out (its circuit breaker is open) gets a short deadline, so a hanging
// receiver holds a slot for seconds, not the full timeout, until it answers again.

import { type EventType, eventBody, type OutboundEventRow } from '../outbox/outbox.js';
import type { EndpointRow } from './endpoints.sql.js';
import { type AttemptResult, sendWebhook } from './http.js';
import type { Keyring } from './keyring.js';
import { webhookHeaders } from './signature.js';

export interface AttemptOptions {
  keys: Keyring;
  timeoutMs: number;
  allowPrivate: boolean;
}

/** The deadline for an endpoint whose last attempt timed out: a fifth of the timeout, at least 2 s. */
export const breakerTimeoutMs = (timeoutMs: number) => Math.min(timeoutMs, Math.max(2_000, Math.round(timeoutMs / 5)));

export async function attemptDelivery(
  opts: AttemptOptions,
  endpoint: EndpointRow,
  event: OutboundEventRow & { type: EventType },
  sealedSecrets: readonly string[],
  startedAt: Date,
): Promise<AttemptResult> {
  const secrets = sealedSecrets.map((s) => opts.keys.open(endpoint.id, s));
  const body = eventBody(event);
  const headers = webhookHeaders(secrets, event.id, Math.floor(startedAt.getTime() / 1000), body);
  return sendWebhook(endpoint.url, headers, body, {
    timeoutMs: endpoint.timing_out ? breakerTimeoutMs(opts.timeoutMs) : opts.timeoutMs,
    allowPrivate: opts.allowPrivate,
  });
}
