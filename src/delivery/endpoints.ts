// Webhook endpoints as customers see them: creating one (within the account's
// cap, its secret sealed), enabling and disabling it (each once, each announced
// to the account's other endpoints by an operational event in the same
// transaction), rotating its secret, deleting it (secrets wiped), and the test
// event. The resource shape is shared by the API and the events.

import { accountLock } from '../accounts/accounts.sql.js';
import { type Refusal, refuse } from '../api/refusal.js';
import { newId } from '../db/ids.js';
import type { Tx } from '../db/tx.js';
import { emit } from '../outbox/outbox.js';
import {
  type DisableReason,
  type EndpointRow,
  endpointDelete,
  endpointDisable,
  endpointEnable,
  endpointInsert,
  endpointTouch,
} from './endpoints.sql.js';
import type { Keyring } from './keyring.js';
import { secretAdd, secretRetireCurrent, secretsWipe } from './secrets.sql.js';
import { newEndpointSecret } from './signature.js';

/** How long a rotated-out secret keeps signing beside the new one. */
export const SECRET_OVERLAP_MS = 24 * 3_600_000;

export function endpointResource(e: EndpointRow) {
  return {
    id: e.id,
    url: e.url,
    description: e.description,
    event_types: e.event_types,
    enabled: e.enabled,
    disabled_reason: e.disabled_reason,
    disabled_at: e.disabled_at?.toISOString() ?? null,
    consecutive_failures: e.consecutive_failures,
    timing_out: e.timing_out,
    created_at: e.created_at.toISOString(),
    updated_at: e.updated_at.toISOString(),
    sequence: e.sequence,
  };
}

export interface NewEndpoint {
  accountId: string;
  url: string;
  description: string | null;
  eventTypes: string[];
}

/** The endpoint and its first secret (shown once, to the caller), or a refusal when the account is at its cap. */
export async function createEndpoint(
  tx: Tx,
  keys: Keyring,
  e: NewEndpoint,
  cap: number,
): Promise<{ endpoint: EndpointRow; secret: string } | Refusal> {
  await accountLock(tx, e.accountId);
  const id = newId('ep');
  const endpoint = await endpointInsert(tx, { id, ...e, cap });
  if (!endpoint) {
    return refuse('too_many_endpoints', `An account can have at most ${cap} webhook endpoints; delete one first`);
  }
  const secret = newEndpointSecret();
  await secretAdd(tx, id, keys.seal(id, secret));
  return { endpoint, secret };
}

/** A new current secret; the one it replaces (and any still overlapping) keeps signing until its 24 h end. */
export async function rotateSecret(
  tx: Tx,
  keys: Keyring,
  accountId: string,
  id: string,
  now: Date,
): Promise<{ endpoint: EndpointRow; secret: string } | null> {
  const endpoint = await endpointTouch(tx, accountId, id, now);
  if (!endpoint) return null;
  await secretRetireCurrent(tx, id, new Date(now.getTime() + SECRET_OVERLAP_MS));
  const secret = newEndpointSecret();
  await secretAdd(tx, id, keys.seal(id, secret));
  return { endpoint, secret };
}

export async function deleteEndpoint(tx: Tx, accountId: string, id: string, now: Date): Promise<EndpointRow | null> {
  const deleted = await endpointDelete(tx, accountId, id, now);
  if (deleted) await secretsWipe(tx, id);
  return deleted;
}

/** disabled → enabled, once, with one webhook_endpoint.enabled; null when it was not disabled. */
export async function enableEndpoint(tx: Tx, accountId: string, id: string, now: Date): Promise<EndpointRow | null> {
  const e = await endpointEnable(tx, accountId, id, now);
  if (!e) return null;
  await emit(tx, {
    accountId: e.account_id,
    tenantId: null,
    type: 'webhook_endpoint.enabled',
    subjectId: e.id,
    data: endpointResource(e),
    occurredAt: now,
  });
  return e;
}

/**
 * enabled → disabled, once, with one webhook_endpoint.disabled saying why and
 * what failed last; null when it was already disabled. Its pending deliveries are
 * the caller's to skip (they may be locked already).
 */
export async function disableEndpoint(
  tx: Tx,
  id: string,
  reason: DisableReason,
  now: Date,
): Promise<EndpointRow | null> {
  const e = await endpointDisable(tx, id, reason, now);
  if (!e) return null;
  await emit(tx, {
    accountId: e.account_id,
    tenantId: null,
    type: 'webhook_endpoint.disabled',
    subjectId: e.id,
    data: { ...endpointResource(e), reason, last_failure: e.last_failure },
    occurredAt: now,
  });
  return e;
}

/** One webhook_endpoint.test to this endpoint alone; its delivery is logged like any other. */
export async function sendTestEvent(tx: Tx, e: EndpointRow, now: Date): Promise<string> {
  const { eventId } = await emit(tx, {
    accountId: e.account_id,
    tenantId: null,
    type: 'webhook_endpoint.test',
    subjectId: e.id,
    data: { ...endpointResource(e), message: 'A test event, sent because it was asked for' },
    occurredAt: now,
  });
  return eventId;
}
