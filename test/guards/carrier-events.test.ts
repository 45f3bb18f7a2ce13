// The guards of carrier_events, each on its own: a webhook is stored (with its
// processing job) once per carrier and event id, an event is marked processed
// once, and a processed event is never touched or deleted before its time. Rows
// come from the factory, in a transaction rolled back after each test.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  carrierEventDeleteProcessed,
  carrierEventLock,
  carrierEventMarkProcessed,
  carrierEventRecordError,
  carrierEventStore,
  carrierEventStoreMany,
  type NewCarrierEvent,
} from '../../src/carrier/events.sql.js';
import type { Tx } from '../../src/db/tx.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { carrierEvent, inRolledBackTx, later, reread, T0, unique } from '../support/factory.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

const webhook = (carrierEventId: string, carrier = 'telnyx'): NewCarrierEvent => ({
  carrier,
  carrierEventId,
  eventType: 'message.finalized',
  subject: 'carrier-msg-1',
  rawJson: JSON.stringify({ data: { id: carrierEventId } }),
});

const jobsFor = async (tx: Tx, eventId: string) =>
  (
    await tx.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM graphile_worker._private_jobs j
         JOIN graphile_worker._private_tasks t ON t.id = j.task_id
        WHERE t.identifier = 'carrier_event.process' AND j.payload->>'eventId' = $1`,
      [eventId],
    )
  ).rows[0]!.n;

describe('carrierEventStore: one row and one processing job per (carrier, carrier event id)', () => {
  it('a webhook is stored once with its job; the same webhook again stores and enqueues nothing', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const first = await carrierEventStore(tx, webhook('evt-1'));
      if (!first.stored) throw new Error('the first delivery of a webhook must be stored');
      expect(await jobsFor(tx, first.id)).toBe(1);
      const row = (await carrierEventLock(tx, first.id))!;
      expect(await carrierEventStore(tx, { ...webhook('evt-1'), rawJson: '{"again":true}' })).toEqual({
        stored: false,
      });
      expect(await reread(tx, 'carrier_events', row)).toEqual(row);
      expect(await jobsFor(tx, first.id)).toBe(1);
    }));

  it('a batch carrying one webhook twice, beside one already stored, stores only the new one once', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const old = await carrierEvent(tx);
      const results = await carrierEventStoreMany(tx, [
        webhook('evt-2'),
        webhook(old.carrier_event_id),
        webhook('evt-2'),
      ]);
      expect(results.map((r) => r.stored)).toEqual([true, false, false]);
      expect(await reread(tx, 'carrier_events', old)).toEqual(old);
    }));

  it('in a batch, each stored row keeps its own body, type and subject, and its job names that row', () =>
    inRolledBackTx(db.pool, async (tx) => {
      // Bodies with quotes, backslashes and non-ASCII text: what an escaped array literal would have had to carry.
      const batch: NewCarrierEvent[] = ['evt-a', 'evt-b', 'evt-c', 'evt-d'].map((id, i) => ({
        carrier: 'telnyx',
        carrierEventId: id,
        eventType: i % 2 ? 'message.received' : 'message.finalized',
        subject: i === 3 ? null : `carrier-msg-${id}`,
        rawJson: JSON.stringify({ data: { id, text: `"${id}" \\ {${i}} \u00e9 ${'x'.repeat(i * 100)}` } }),
      }));
      const results = await carrierEventStoreMany(tx, batch);
      for (const [i, r] of results.entries()) {
        if (!r.stored) throw new Error(`${batch[i]!.carrierEventId} was not stored`);
        const row = (await carrierEventLock(tx, r.id))!;
        expect(row).toMatchObject({
          carrier_event_id: batch[i]!.carrierEventId,
          event_type: batch[i]!.eventType,
          subject: batch[i]!.subject,
          payload: JSON.parse(batch[i]!.rawJson),
        });
        expect(await jobsFor(tx, r.id)).toBe(1);
      }
    }));

  it('the same event id from another carrier is another event', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const old = await carrierEvent(tx);
      expect(await carrierEventStore(tx, webhook(old.carrier_event_id, 'othercarrier'))).toMatchObject({
        stored: true,
      });
    }));
});

describe('carrierEventMarkProcessed: an event is processed once', () => {
  it('an event is marked processed once; a second run keeps the first outcome', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await carrierEvent(tx);
      await carrierEventMarkProcessed(tx, e.id, later(1), null);
      const processed = await reread(tx, 'carrier_events', e);
      expect(processed).toEqual({ ...e, processed_at: later(1) });
      await carrierEventMarkProcessed(tx, e.id, later(2), 'no message has that id');
      expect(await reread(tx, 'carrier_events', e)).toEqual(processed);
    }));

  it('a processed event records no later error', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await carrierEvent(tx, { processed_at: T0 });
      await carrierEventRecordError(tx, e.id, 'boom');
      expect(await reread(tx, 'carrier_events', e)).toEqual(e);
      const waiting = await carrierEvent(tx);
      await carrierEventRecordError(tx, waiting.id, 'boom');
      expect(await reread(tx, 'carrier_events', waiting)).toEqual({ ...waiting, error: 'boom' });
    }));
});

describe('carrierEventDeleteProcessed: retention deletes processed events only', () => {
  it('an old processed event is deleted once; an unprocessed one is never deleted', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const processed = await carrierEvent(tx, { processed_at: T0, carrier_event_id: unique('old') });
      const waiting = await carrierEvent(tx);
      // Retention goes by the row's own creation time (its id and created_at), which is the clock's.
      const inAnHour = new Date(Date.now() + 3_600_000);
      expect(await carrierEventDeleteProcessed(tx, inAnHour, 10_000)).toBe(1);
      expect(await carrierEventLock(tx, processed.id)).toBeNull();
      expect(await carrierEventDeleteProcessed(tx, inAnHour, 10_000)).toBe(0);
      expect(await reread(tx, 'carrier_events', waiting)).toEqual(waiting);
    }));
});
