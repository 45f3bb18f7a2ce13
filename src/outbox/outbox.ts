// The outbox: emit() writes one customer event in the transaction of the state
// change that produced it, with one delivery per endpoint subscribed at that
// moment, each pending one due to the delivery relay (or, for a failing
// endpoint, with a job in its lane) — all in that transaction. If the transition
// did not apply, emit is never called; if the transaction rolls back, the event,
// its deliveries and their jobs roll back with it. The event id (the
// row id) is the webhook-id on every attempt. Inside a worker's carrier-event
// batch the healthy endpoints' deliveries are leased to that worker's relay
// instead of announced (delivery/handoff.ts).

import { newId } from '../db/ids.js';
import { together, type Tx } from '../db/tx.js';
import { deliveriesFanOut } from '../delivery/deliveries.sql.js';
import { handOffOf } from '../delivery/handoff.js';
import { scheduleDeliveries } from '../delivery/schedule.js';
import { eventInsert, type NewEvent, type OutboundEventRow } from './outbox.sql.js';

export { EVENT_TYPES, type EventType, type OutboundEventRow } from './outbox.sql.js';

export type EmitInput = NewEvent;

export async function emit(tx: Tx, e: EmitInput): Promise<{ eventId: string; deliveries: number }> {
  const handOff = handOffOf(tx);
  // The id is made here so the fan-out need not wait for the insert: one round trip for both.
  const id = newId('evt');
  const [event, deliveries] = await together(
    tx,
    () => eventInsert(tx, { ...e, id }),
    () =>
      deliveriesFanOut(
        tx,
        { id, account_id: e.accountId, type: e.type, subject_id: e.subjectId },
        handOff?.leaseUntil ?? null,
      ),
  );
  if (handOff) {
    for (const d of deliveries) {
      if (d.work) handOff.add(tx, { ...d.work, event });
    }
  }
  await scheduleDeliveries(
    tx,
    deliveries.filter((d) => d.status === 'pending'),
    'scheduled',
  );
  return { eventId: event.id, deliveries: deliveries.length };
}

/** The customer-facing event body (Standard Webhooks); the same bytes on every attempt. */
export function eventBody(ev: OutboundEventRow): string {
  return JSON.stringify(eventResource(ev));
}

export function eventResource(ev: OutboundEventRow) {
  return {
    id: ev.id,
    type: ev.type,
    timestamp: ev.occurred_at.toISOString(),
    account_id: ev.account_id,
    data: ev.data,
  };
}
