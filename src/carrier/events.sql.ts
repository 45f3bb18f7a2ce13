// SQL for carrier_events, the raw webhooks as the carrier sent them. Ingest stores
// each one once (the unique (carrier, carrier_event_id) decides, not a lookup); the
// stored, unprocessed row is its processing job, claimed by the worker's relay
// (carrier/relay.ts), which marks it processed or postpones it with its error.

import { newId } from '../db/ids.js';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export interface CarrierEventRow {
  id: string;
  carrier: string;
  carrier_event_id: string;
  event_type: string;
  subject: string | null;
  payload: unknown;
  processed_at: Date | null;
  error: string | null;
  created_at: Date;
  /** The runs that did not apply: the event waited for what it is about, or its processing failed. */
  attempts: number;
  /** A postponed event is not claimed before this. */
  run_after: Date | null;
}
const CARRIER_EVENT_COLUMNS =
  'id, carrier, carrier_event_id, event_type, subject, payload, processed_at, error, created_at, attempts, run_after';

/** Ingest NOTIFYs this channel once per batch that stored something new; the relay LISTENs to it. */
export const CARRIER_EVENT_CHANNEL = 'handset_carrier_events';

/** The column list the row above is typed from, held to the table by a test. */
export const CARRIER_EVENT_TABLE_COLUMNS = { carrier_events: CARRIER_EVENT_COLUMNS };

export type StoreResult = { stored: true; id: string } | { stored: false };

export interface NewCarrierEvent {
  carrier: string;
  carrierEventId: string;
  eventType: string;
  /** The carrier resource the event is about (a leg's control id, a message id), when it names one. */
  subject: string | null;
  /** The verified body as the carrier sent it; it goes straight to jsonb (no parse/stringify round trip). */
  rawJson: string;
}

/**
 * Stores verified webhooks as ONE statement, so it is one transaction and one
 * round trip. A stored row with no processed_at is the event's processing job (the
 * relay claims it), so "stored" and "will be processed" are one row and cannot
 * diverge. A duplicate (already stored, or earlier in the same batch) inserts
 * nothing. The ids are made here, in TypeScript; the statement pairs each inserted
 * row with its input by position. One NOTIFY per batch that stored anything wakes
 * the relays (PostgreSQL serializes the commits of notifying transactions, so one
 * per event would bound ingest); a batch with nothing new notifies nobody. Rows go
 * in key order, so two concurrent batches carrying the same events wait for each
 * other instead of deadlocking on the unique index.
 */
export async function carrierEventStoreMany(db: Db, events: readonly NewCarrierEvent[]): Promise<StoreResult[]> {
  const ids = events.map(() => newId('cev'));
  const { rows } = await db.query<{ carrier: string; carrier_event_id: string; id: string }>({
    name: 'carrier_event_store_many',
    text: `WITH input AS (
             SELECT t.id, t.carrier, t.carrier_event_id, t.event_type, p.payload, t.subject
               FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $6::text[])
                      WITH ORDINALITY AS t (id, carrier, carrier_event_id, event_type, subject, n)
               JOIN jsonb_array_elements($5::jsonb) WITH ORDINALITY AS p (payload, n) ON p.n = t.n
           ), ins AS (
             INSERT INTO carrier_events (id, carrier, carrier_event_id, event_type, payload, subject)
             SELECT id, carrier, carrier_event_id, event_type, payload, subject FROM input
              ORDER BY carrier, carrier_event_id
             ON CONFLICT (carrier, carrier_event_id) DO NOTHING
             RETURNING id, carrier, carrier_event_id
           )
           -- The notify subquery runs (once) only when ins returned rows: nothing new, nobody woken.
           SELECT ins.id, ins.carrier, ins.carrier_event_id, (SELECT pg_notify($7, '')) AS woke FROM ins`,
    values: [
      ids,
      events.map((e) => e.carrier),
      events.map((e) => e.carrierEventId),
      events.map((e) => e.eventType),
      // The bodies as one JSON array, joined as they are: each is JSON already, and
      // an array literal of them would have every quote in every body escaped.
      `[${events.map((e) => e.rawJson).join(',')}]`,
      events.map((e) => e.subject),
      CARRIER_EVENT_CHANNEL,
    ],
  });
  // Each stored row answers the first request in the batch that carried its key.
  const stored = new Map(rows.map((r) => [`${r.carrier}\u0000${r.carrier_event_id}`, r.id]));
  return events.map((e) => {
    const key = `${e.carrier}\u0000${e.carrierEventId}`;
    const id = stored.get(key);
    if (id === undefined) return { stored: false };
    stored.delete(key);
    return { stored: true, id };
  });
}

/** One event: the same statement with a batch of one. */
export async function carrierEventStore(db: Db, event: NewCarrierEvent): Promise<StoreResult> {
  const [result] = await carrierEventStoreMany(db, [event]);
  return result!;
}

/**
 * Whether an event of one of `eventTypes` about `subject` is stored and not yet
 * processed, other than those in `except` (the event asking, and those its batch
 * has already run, which are marked processed when the batch commits): the word a
 * waiting event depends on has arrived and will be applied, so the wait must not end.
 */
export async function carrierEventPendingAbout(
  db: Db,
  carrier: string,
  subject: string,
  eventTypes: readonly string[],
  except: readonly string[] = [],
): Promise<boolean> {
  const { rows } = await db.query({
    name: 'carrier_event_pending_about',
    text: `SELECT 1 FROM carrier_events
            WHERE carrier = $1 AND subject = $2 AND processed_at IS NULL AND event_type = ANY ($3::text[])
              AND id <> ALL ($4::text[])
            LIMIT 1`,
    values: [carrier, subject, eventTypes, except],
  });
  return rows.length > 0;
}

/** The payloads of the stored events of `eventTypes` about `subject`, oldest first. */
export async function carrierEventPayloadsAbout(
  db: Db,
  carrier: string,
  subject: string,
  eventTypes: readonly string[],
): Promise<unknown[]> {
  const { rows } = await db.query<{ payload: unknown }>({
    name: 'carrier_event_payloads_about',
    text: `SELECT payload FROM carrier_events WHERE carrier = $1 AND subject = $2 AND event_type = ANY ($3::text[])
            ORDER BY created_at, id`,
    values: [carrier, subject, eventTypes],
  });
  return rows.map((r) => r.payload);
}

/** Locks the event row for the processing transaction, so two runs of one job serialize. */
export async function carrierEventLock(tx: Tx, id: string): Promise<CarrierEventRow | null> {
  const { rows } = await tx.query<CarrierEventRow>({
    name: 'carrier_event_lock',
    text: `SELECT ${CARRIER_EVENT_COLUMNS} FROM carrier_events WHERE id = $1 FOR UPDATE`,
    values: [id],
  });
  return rows[0] ?? null;
}

/** Where the events stored from `at` on begin in id order: an id starts with its creation's millisecond. */
export function carrierEventIdAt(at: Date): string {
  return `cev_${Math.floor(at.getTime()).toString(16).padStart(12, '0')}`;
}

/**
 * Claims up to `limit` unprocessed events that are due, oldest first, locked for
 * the claiming transaction: another relay skips them, and a relay that dies
 * releases them with its transaction, so a crash needs no sweeper.
 *
 * From the head of the pending index, or from `from` (no event below that id).
 * Why: a processed event leaves a dead entry at the head of the pending index
 * until VACUUM removes it, and a claim from the head walks all of them (600 index pages, 2 ms, for one row
 * after a minute of receipts at 300/s; on a large table autovacuum comes once a
 * fifth of it has changed). The relay claims from the head once a second and from
 * where that claim found the oldest due event in between (relay.ts).
 */
export async function carrierEventClaim(tx: Tx, now: Date, limit: number, from = ''): Promise<CarrierEventRow[]> {
  const { rows } = await tx.query<CarrierEventRow>({
    // The statement is the function carrier_events_due (migration 0014), for the planner
    // settings it carries: a walk of the pending index in id order that stops at the
    // limit. A named statement's connection kept the plan it made on a young table (a
    // scan and a sort of every pending event); planned afresh on statistics that say
    // few are pending, it read the whole pending index and sorted it.
    name: 'carrier_event_claim',
    text: `SELECT ${CARRIER_EVENT_COLUMNS} FROM carrier_events_due($1, $2, $3)`,
    values: [now, limit, from],
  });
  return rows;
}

/**
 * A run that did not apply (its changes rolled back): records why, counts the
 * attempt, and holds the event back until `runAfter`.
 */
export async function carrierEventPostpone(db: Db, id: string, error: string, runAfter: Date): Promise<void> {
  await db.query({
    name: 'carrier_event_postpone',
    text: `UPDATE carrier_events SET error = $2, attempts = attempts + 1, run_after = $3
            WHERE id = $1 AND processed_at IS NULL`,
    values: [id, error.slice(0, 2000), runAfter],
  });
}

/** An event run to its end in a transaction: marked processed before that transaction commits. */
export interface Settled {
  id: string;
  /** Why a rejected event had no effect; null for one that applied or was ignored. */
  error: string | null;
}

/**
 * Marks events processed, once, in one statement for a whole batch: the relay
 * marks what its batch settled just before the batch commits, in the same
 * transaction as their effects. Each event's row is locked first, by primary key,
 * in id order (the relay's claim holds them already); the guard reads the locked
 * row, not the table: a `processed_at IS NULL` on the table itself lets the planner
 * walk a pending index whole (every event waiting in a backlog) when its statistics
 * say few are pending, as they mostly are.
 */
export async function carrierEventMarkProcessed(db: Db, settled: readonly Settled[], now: Date): Promise<void> {
  if (settled.length === 0) return;
  await db.query({
    // Unnamed, so planned at every run for its own ids and the table as it is now: a
    // named statement's connection keeps a generic plan after a few runs, and one made
    // while the table was small scans it whole once it has grown. Under the pipeline
    // bench the old statement took 3-14 ms a batch, reading every pending event.
    text: `WITH locked AS (
             SELECT c.id, c.processed_at FROM carrier_events c WHERE c.id = ANY ($1::text[]) ORDER BY c.id FOR UPDATE
           )
           UPDATE carrier_events c SET processed_at = $3, error = s.error
             FROM locked l JOIN unnest($1::text[], $2::text[]) AS s (id, error) ON s.id = l.id
            WHERE c.id = ANY ($1::text[]) AND c.id = l.id AND l.processed_at IS NULL`,
    values: [settled.map((e) => e.id), settled.map((e) => e.error), now],
  });
}

/**
 * Deletes up to `batch` processed events created before `before`. Ids begin with
 * their creation time in hex, so "created before" is a primary-key range and needs
 * no index of its own (ingest pays for none). Unprocessed events are never deleted.
 */
export async function carrierEventDeleteProcessed(db: Db, before: Date, batch: number): Promise<number> {
  const ceiling = carrierEventIdAt(before);
  const { rowCount } = await db.query({
    name: 'carrier_event_delete_processed',
    text: `DELETE FROM carrier_events WHERE id IN (
             SELECT id FROM carrier_events WHERE id < $1 AND processed_at IS NOT NULL AND created_at < $2
              ORDER BY id LIMIT $3)`,
    values: [ceiling, before, batch],
  });
  return rowCount ?? 0;
}

/**
 * The carrier's ids (subjects) of stored events of `eventTypes` that hand back
 * our message id as their marker (payload.handset_message: Twilio keeps the
 * StatusCallback URL we sent, with our id, per message). A send whose answer we
 * lost is found this way as soon as one of its callbacks came.
 */
export async function carrierEventSubjectsMarked(
  db: Db,
  carrier: string,
  messageId: string,
  eventTypes: readonly string[],
): Promise<string[]> {
  const { rows } = await db.query<{ subject: string }>({
    name: 'carrier_event_subjects_marked',
    text: `SELECT DISTINCT subject FROM carrier_events
            WHERE payload ? 'handset_message' AND payload ->> 'handset_message' = $2
              AND carrier = $1 AND event_type = ANY ($3::text[]) AND subject IS NOT NULL`,
    values: [carrier, messageId, eventTypes],
  });
  return rows.map((r) => r.subject);
}
