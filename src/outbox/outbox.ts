// The outbox: emit() writes one customer event in the transaction of the state
// change that produced it, with one delivery per endpoint subscribed at that
// moment (an endpoint disabled right now gets a `skipped` delivery) and a
// delivery job per pending delivery — all in that transaction, as one statement.
// If the transition did not apply, emit is never called; if the transaction rolls
// back, the event, its deliveries and their jobs roll back with it. The event id
// (the row id) is the webhook-id on every attempt. Owns outbound_events.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export const EVENT_TYPES = [
  'message.sent',
  'message.delivered',
  'message.failed',
  'message.canceled',
  'message.received',
  'call.initiated',
  'call.answered',
  'call.completed',
  'call.missed',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export interface EmitInput {
  accountId: string;
  tenantId: string | null;
  type: EventType;
  /** The resource the event is about (msg_…, call_…). */
  subjectId: string;
  /** The resource after the transition, as the API shows it. */
  data: object;
  /** When the transition happened; the event body's `timestamp`. */
  occurredAt: Date;
}

export interface OutboundEventRow {
  id: string;
  account_id: string;
  tenant_id: string | null;
  type: EventType;
  subject_id: string;
  data: Record<string, unknown>;
  occurred_at: Date;
  created_at: Date;
}

export async function emit(tx: Tx, e: EmitInput): Promise<{ eventId: string; deliveries: number }> {
  const { rows } = await tx.query<{ event_id: string; deliveries: number }>({
    name: 'outbox_emit',
    text: `WITH ev AS (
             INSERT INTO outbound_events (account_id, tenant_id, type, subject_id, data, occurred_at)
             VALUES ($1, $2, $3, $4, $5::jsonb, $6)
             RETURNING id
           ), dl AS (
             INSERT INTO webhook_deliveries (event_id, endpoint_id, status)
             SELECT ev.id, e.id, CASE WHEN e.enabled THEN 'pending' ELSE 'skipped' END
               FROM ev, webhook_endpoints e
              WHERE e.account_id = $1 AND e.deleted_at IS NULL
                AND (cardinality(e.event_types) = 0 OR $3 = ANY (e.event_types))
             RETURNING id, endpoint_id, status
           )
           SELECT ev.id AS event_id,
                  (SELECT count(*) FROM dl) AS deliveries,
                  (SELECT count(*)
                     FROM dl JOIN webhook_endpoints e ON e.id = dl.endpoint_id,
                          LATERAL graphile_worker.add_job('delivery.attempt',
                                    json_build_object('deliveryId', dl.id, 'trigger', 'scheduled'),
                                    queue_name => ${deliveryLane('e')},
                                    job_key => 'delivery:' || dl.id)
                    WHERE dl.status = 'pending') AS jobs
             FROM ev`,
    values: [e.accountId, e.tenantId, e.type, e.subjectId, JSON.stringify(e.data), e.occurredAt],
  });
  const row = rows[0]!;
  return { eventId: row.event_id, deliveries: row.deliveries };
}

/**
 * The graphile-worker queue a delivery job runs in. Deliveries to a healthy
 * endpoint run in parallel (no queue); an endpoint that is failing gets one
 * serial lane, so a hanging endpoint holds at most one worker slot at a time.
 * `e` names a webhook_endpoints row in the surrounding SQL.
 */
export function deliveryLane(e: string): string {
  return `CASE WHEN ${e}.consecutive_failures > 0 THEN 'endpoint:' || ${e}.id END`;
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

export async function eventGet(db: Db, accountId: string, id: string): Promise<OutboundEventRow | null> {
  const { rows } = await db.query<OutboundEventRow>('SELECT * FROM outbound_events WHERE id = $1 AND account_id = $2', [
    id,
    accountId,
  ]);
  return rows[0] ?? null;
}

export async function eventList(
  db: Db,
  accountId: string,
  filter: { type?: string | undefined; subjectId?: string | undefined },
  limit: number,
  startingAfter: string | null,
): Promise<OutboundEventRow[]> {
  const { rows } = await db.query<OutboundEventRow>(
    `SELECT * FROM outbound_events
      WHERE account_id = $1 AND ($2::text IS NULL OR type = $2) AND ($3::text IS NULL OR subject_id = $3)
        AND ($4::text IS NULL OR id < $4)
      ORDER BY id DESC LIMIT $5`,
    [accountId, filter.type ?? null, filter.subjectId ?? null, startingAfter, limit + 1],
  );
  return rows;
}
