// SQL for outbound_events: the customer events, one row per transition that
// earned one, written in that transition's transaction and never changed after.
// Reads named `…OfAccount` take the account and find only its rows.

import type { TSchema } from 'typebox';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

/** Every customer event type; the API's enums and the endpoint subscriptions derive from it. */
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
  'call.recording.saved',
  'call.recording.failed',
  'call.transcription.completed',
  'opt_out.created',
  'opt_out.deleted',
  'webhook_endpoint.disabled',
  'webhook_endpoint.enabled',
  'webhook_delivery.exhausted',
  'webhook_endpoint.test',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Operational events about an endpoint (their subject): delivered to the account's others, never to it. */
export const ABOUT_ENDPOINT_EVENT_TYPES = [
  'webhook_endpoint.disabled',
  'webhook_endpoint.enabled',
  'webhook_delivery.exhausted',
] as const satisfies readonly EventType[];

/** Sent when a customer asks, to the endpoint it is about only, whatever that endpoint subscribes to. */
export const TEST_EVENT_TYPE = 'webhook_endpoint.test' satisfies EventType;

/** Each event type's `data` schema, declared by the domain whose resource it carries. */
export type EventSchemas = { readonly [K in EventType]?: TSchema };

/** Events that report no transition of their subject: they carry its sequence unchanged. */
export const UNSEQUENCED_EVENT_TYPES = [
  'webhook_endpoint.test',
  'webhook_delivery.exhausted',
] as const satisfies readonly EventType[];

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
const EVENT_COLUMNS = 'id, account_id, tenant_id, type, subject_id, data, occurred_at, created_at';

/** The column list the row above is typed from, held to the table by a test. */
export const EVENT_TABLE_COLUMNS = { outbound_events: EVENT_COLUMNS };

export interface NewEvent {
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

/** Inserts an event under the id its caller made (db/ids.ts), so statements about it can go beside this one. */
export async function eventInsert(tx: Tx, e: NewEvent & { id: string }): Promise<OutboundEventRow> {
  const { rows } = await tx.query<OutboundEventRow>({
    name: 'event_insert',
    text: `INSERT INTO outbound_events (id, account_id, tenant_id, type, subject_id, data, occurred_at)
           VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)
           RETURNING ${EVENT_COLUMNS}`,
    values: [e.id, e.accountId, e.tenantId, e.type, e.subjectId, JSON.stringify(e.data), e.occurredAt],
  });
  return rows[0]!;
}

export async function eventOfAccount(db: Db, accountId: string, id: string): Promise<OutboundEventRow | null> {
  const { rows } = await db.query<OutboundEventRow>({
    name: 'event_of_account',
    text: `SELECT ${EVENT_COLUMNS} FROM outbound_events WHERE id = $1 AND account_id = $2`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

export async function eventList(
  db: Db,
  accountId: string,
  filter: { type?: string | undefined; subjectId?: string | undefined },
  limit: number,
  startingAfter: string | null,
): Promise<OutboundEventRow[]> {
  const { rows } = await db.query<OutboundEventRow>({
    name: 'event_list',
    text: `SELECT ${EVENT_COLUMNS} FROM outbound_events
            WHERE account_id = $1 AND ($2::text IS NULL OR type = $2) AND ($3::text IS NULL OR subject_id = $3)
              AND ($4::text IS NULL OR id < $4)
            ORDER BY id DESC LIMIT $5`,
    values: [accountId, filter.type ?? null, filter.subjectId ?? null, startingAfter, limit + 1],
  });
  return rows;
}
