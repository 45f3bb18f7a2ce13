// One HTTP attempt of a delivery, signed with every secret the endpoint signs
// with now: no database connection is held while it runs. Every attempt has the
// whole timeout, whatever the endpoint's health: a receiver that answers 2xx
// within it has succeeded. An endpoint that is timing out is held to one attempt
// at a time by its lane (deliver.ts), never to a shorter deadline.

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
    timeoutMs: opts.timeoutMs,
    allowPrivate: opts.allowPrivate,
  });
}
