// SQL for carrier_events, the raw webhooks as the carrier sent them. Ingest stores
// each one once (the unique (carrier, carrier_event_id) decides, not a lookup) and
// enqueues its processing job; the processing job marks it processed or records
// why it failed.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export interface CarrierEventRow {
  id: string;
  carrier: string;
  carrier_event_id: string;
  event_type: string;
  payload: unknown;
  processed_at: Date | null;
  error: string | null;
  created_at: Date;
}

export type StoreResult = { stored: true; id: string } | { stored: false };

/**
 * Stores a verified webhook and enqueues its processing job as ONE statement, so
 * it is one transaction and one round trip: the event row and its job commit
 * together or not at all. A duplicate inserts nothing, so it enqueues nothing. The
 * raw JSON text goes straight to jsonb (no parse/stringify round trip).
 */
export async function carrierEventStore(
  db: Db,
  carrier: string,
  carrierEventId: string,
  eventType: string,
  rawJson: string,
): Promise<StoreResult> {
  const { rows } = await db.query<{ id: string }>({
    name: 'carrier_event_store',
    text: `WITH ins AS (
             INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload)
             VALUES ($1, $2, $3, $4::jsonb)
             ON CONFLICT (carrier, carrier_event_id) DO NOTHING
             RETURNING id
           )
           SELECT ins.id FROM ins,
             LATERAL graphile_worker.add_job('carrier_event.process', json_build_object('eventId', ins.id)) AS job`,
    values: [carrier, carrierEventId, eventType, rawJson],
  });
  const row = rows[0];
  return row ? { stored: true, id: row.id } : { stored: false };
}

/** Locks the event row for the processing transaction, so two runs of one job serialize. */
export async function carrierEventLock(tx: Tx, id: string): Promise<CarrierEventRow | null> {
  const { rows } = await tx.query<CarrierEventRow>({
    name: 'carrier_event_lock',
    text: 'SELECT * FROM carrier_events WHERE id = $1 FOR UPDATE',
    values: [id],
  });
  return rows[0] ?? null;
}

/** Marks the event processed; `error` records why a rejected event had no effect. */
export async function carrierEventMarkProcessed(tx: Tx, id: string, now: Date, error: string | null): Promise<void> {
  await tx.query({
    name: 'carrier_event_mark_processed',
    text: 'UPDATE carrier_events SET processed_at = $2, error = $3 WHERE id = $1',
    values: [id, now, error],
  });
}

/** Records the last error of a failed processing attempt (its transaction rolled back). */
export async function carrierEventRecordError(db: Db, id: string, error: string): Promise<void> {
  await db.query({
    name: 'carrier_event_record_error',
    text: 'UPDATE carrier_events SET error = $2 WHERE id = $1 AND processed_at IS NULL',
    values: [id, error.slice(0, 2000)],
  });
}

/**
 * Deletes up to `batch` processed events created before `before`. Ids begin with
 * their creation time in hex, so "created before" is a primary-key range and needs
 * no index of its own (ingest pays for none). Unprocessed events are never deleted.
 */
export async function carrierEventDeleteProcessed(db: Db, before: Date, batch: number): Promise<number> {
  const ceiling = `cev_${Math.floor(before.getTime()).toString(16).padStart(12, '0')}`;
  const { rowCount } = await db.query({
    name: 'carrier_event_delete_processed',
    text: `DELETE FROM carrier_events WHERE id IN (
             SELECT id FROM carrier_events WHERE id < $1 AND processed_at IS NOT NULL AND created_at < $2
              ORDER BY id LIMIT $3)`,
    values: [ceiling, before, batch],
  });
  return rowCount ?? 0;
}
