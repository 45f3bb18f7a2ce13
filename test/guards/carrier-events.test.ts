// The guards of carrier_events, each on its own: a webhook is stored (pending, its
// own processing job) once per carrier and event id, it is claimed by one relay at
// a time and only when due, an event is marked processed once, and a processed
// event is never touched or deleted before its time. Rows come from the factory,
// in a transaction rolled back after each test.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  carrierEventDeleteProcessed,
  carrierEventLock,
  carrierEventMarkProcessed,
  carrierEventClaim,
  carrierEventIdAt,
  carrierEventPostpone,
  carrierEventStore,
  carrierEventStoreMany,
  type NewCarrierEvent,
} from '../../src/carrier/events.sql.js';
import type { Tx } from '../../src/db/tx.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { onOneConnection, onStatisticsOfNow, pagesRead } from '../support/plan.js';
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

/** Stored events waiting to be processed: each one is its own processing job. */
const pending = async (tx: Tx) =>
  (await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM carrier_events WHERE processed_at IS NULL')).rows[0]!
    .n;

/** `n` new pending events, their ids made now as ingest makes them; their ids. */
const insertEvents = async (n: number, tag: string): Promise<string[]> =>
  (
    await db.pool.query<{ id: string }>(
      `INSERT INTO carrier_events (id, carrier, carrier_event_id, event_type, payload, subject)
       SELECT handset_id('cev'), 'telnyx', $1 || n, 'message.finalized', '{}', $1 || n
         FROM generate_series(1, $2::int) AS n RETURNING id`,
      [unique(tag), n],
    )
  ).rows.map((r) => r.id);

/** Runs `use` on a young table: a few events, processed, and its statistics taken then (onStatisticsOfNow). */
const onAYoungTable = async <T>(use: () => Promise<T>): Promise<T> => {
  await db.pool.query('DELETE FROM carrier_events');
  await insertEvents(20, 'young');
  await db.pool.query('UPDATE carrier_events SET processed_at = now()');
  try {
    return await onStatisticsOfNow(db.pool, 'carrier_events', use);
  } finally {
    await db.pool.query('DELETE FROM carrier_events');
    await db.pool.query('VACUUM carrier_events'); // later tests walk the pending index from a recent id
  }
};

describe('carrierEventStore: one pending row per (carrier, carrier event id)', () => {
  it('a webhook is stored once, pending; the same webhook again stores nothing and changes nothing', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const before = await pending(tx);
      const first = await carrierEventStore(tx, webhook('evt-1'));
      if (!first.stored) throw new Error('the first delivery of a webhook must be stored');
      const row = (await carrierEventLock(tx, first.id))!;
      expect(row).toMatchObject({ processed_at: null, attempts: 0, run_after: null });
      expect(await pending(tx)).toBe(before + 1);
      expect(await carrierEventStore(tx, { ...webhook('evt-1'), rawJson: '{"again":true}' })).toEqual({
        stored: false,
      });
      expect(await reread(tx, 'carrier_events', row)).toEqual(row);
      expect(await pending(tx)).toBe(before + 1);
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

  it('in a batch, each stored row keeps its own body, type and subject', () =>
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
      await carrierEventMarkProcessed(tx, [{ id: e.id, error: null }], later(1));
      const processed = await reread(tx, 'carrier_events', e);
      expect(processed).toEqual({ ...e, processed_at: later(1) });
      await carrierEventMarkProcessed(tx, [{ id: e.id, error: 'no message has that id' }], later(2));
      expect(await reread(tx, 'carrier_events', e)).toEqual(processed);
    }));

  it('a processed event is never postponed; a pending one records its error, counts the attempt, waits', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await carrierEvent(tx, { processed_at: T0 });
      await carrierEventPostpone(tx, e.id, 'boom', later(5));
      expect(await reread(tx, 'carrier_events', e)).toEqual(e);
      const waiting = await carrierEvent(tx);
      await carrierEventPostpone(tx, waiting.id, 'boom', later(5));
      await carrierEventPostpone(tx, waiting.id, 'boom again', later(9));
      expect(await reread(tx, 'carrier_events', waiting)).toEqual({
        ...waiting,
        error: 'boom again',
        attempts: 2,
        run_after: later(9),
      });
    }));

  it('marking a batch on a connection that marked while the table was young reads the batch, not the 5,000 pending since', async () => {
    const read = await onAYoungTable(() =>
      onOneConnection(db.pool, async (client, watch) => {
        const mark = (ids: string[]) =>
          carrierEventMarkProcessed(
            client as unknown as Tx,
            ids.map((id) => ({ id, error: null })),
            new Date(),
          );
        // As a relay's connection does from its first moments: batches of a few events.
        for (let i = 0; i < 10; i++) await mark(await insertEvents(3, 'early'));
        // A backlog the relay has yet to reach, its rows in the pending indexes.
        await insertEvents(5_000, 'backlog');
        const batch = await insertEvents(3, 'batch');
        return watch('carrier_events', () => mark(batch));
      }),
    );
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(50);
  });
});

describe('carrierEventClaim: a pending event is claimed when due, by one transaction at a time', () => {
  it('claims due pending events oldest first; not a processed one, nor one postponed past now', () =>
    inRolledBackTx(db.pool, async (tx) => {
      await tx.query('DELETE FROM carrier_events');
      const a = await carrierEvent(tx, { carrier_event_id: unique('a') });
      const b = await carrierEvent(tx, { carrier_event_id: unique('b') });
      await carrierEvent(tx, { carrier_event_id: unique('done'), processed_at: T0 });
      const c = await carrierEvent(tx, { carrier_event_id: unique('c') });
      await carrierEventPostpone(tx, b.id, 'waiting: its message', later(5));
      const ids = async (now: Date, limit = 10) => (await carrierEventClaim(tx, now, limit)).map((r) => r.id);
      expect(await ids(later(4))).toEqual([a.id, c.id].sort());
      expect(await ids(later(5))).toEqual([a.id, b.id, c.id].sort());
      expect(await ids(later(5), 1)).toEqual([[a.id, b.id, c.id].sort()[0]]);
    }));

  it('a claim from an id takes only the due events not below it, oldest first', () =>
    inRolledBackTx(db.pool, async (tx) => {
      await tx.query('DELETE FROM carrier_events');
      const at = (ms: number) => new Date(T0.getTime() + ms);
      const storedAt = (ms: number, o: Parameters<typeof carrierEvent>[1] = {}) =>
        carrierEvent(tx, { id: `${carrierEventIdAt(at(ms))}${unique('r').slice(-16).padStart(16, '0')}`, ...o });
      await storedAt(-1);
      const edge = await storedAt(0);
      const later1 = await storedAt(5);
      await storedAt(6, { processed_at: T0 });
      await storedAt(7, { run_after: later(60) });
      const ids = async (from?: string) => (await carrierEventClaim(tx, later(1), 10, from)).map((r) => r.id);
      expect(await ids(carrierEventIdAt(at(0)))).toEqual([edge.id, later1.id]);
      expect(await ids()).toHaveLength(3);
    }));

  it('a claim from an id does not walk the events processed below it', async () => {
    await db.pool.query('DELETE FROM carrier_events');
    // A busy minute: thousands of events processed, no VACUUM yet; then one new one.
    await db.pool.query(
      `INSERT INTO carrier_events (id, carrier, carrier_event_id, event_type, payload)
       SELECT $1 || lpad(to_hex(n), 16, '0'), 'telnyx', 'walk-' || n, 'message.sent', '{}'
         FROM generate_series(1, 5000) AS n`,
      [carrierEventIdAt(new Date(Date.now() - 60_000))],
    );
    await db.pool.query(`UPDATE carrier_events SET processed_at = now()`);
    const fresh = await carrierEvent(db.pool as unknown as Tx, { carrier_event_id: unique('fresh') });
    const now = new Date(Date.now() + 1000);
    const claim = (from?: string) => (pool: Parameters<Parameters<typeof pagesRead>[1]>[0]) =>
      carrierEventClaim(pool as unknown as Tx, now, 50, from);
    const fromHead = await pagesRead(db.pool, claim());
    const from = carrierEventIdAt(new Date(Date.now() - 10_000));
    const recent = await pagesRead(db.pool, claim(from));
    expect((await carrierEventClaim(db.pool as unknown as Tx, now, 50, from))[0]?.id).toBe(fresh.id);
    // From the head: the pending index's dead entries, page after page. From the id: a few pages.
    expect(recent).toBeLessThan(10);
    expect(fromHead).toBeGreaterThan(recent * 3);
    await db.pool.query('DELETE FROM carrier_events');
  });

  it('a claim on a connection that claimed while the table was young reads its batch, not the 5,000 pending behind it', async () => {
    const read = await onAYoungTable(() =>
      onOneConnection(db.pool, async (client, watch) => {
        const claim = () => carrierEventClaim(client as unknown as Tx, new Date(Date.now() + 1000), 50, '');
        // As a relay's connection does from its first moments: claims of the few events there are.
        for (let i = 0; i < 10; i++) {
          await insertEvents(3, 'early');
          await claim();
          await db.pool.query('UPDATE carrier_events SET processed_at = now() WHERE processed_at IS NULL');
        }
        await insertEvents(5_000, 'backlog');
        return watch('carrier_events', claim);
      }),
    );
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(150);
  });

  it('an event another transaction holds is skipped, not waited for', async () => {
    const other = await db.pool.connect();
    try {
      await other.query('BEGIN');
      const mine = await carrierEvent(other as Tx, { carrier_event_id: unique('held') });
      await other.query('COMMIT');
      await other.query('BEGIN');
      expect((await carrierEventClaim(other as Tx, later(0), 1000)).map((r) => r.id)).toContain(mine.id);
      await inRolledBackTx(db.pool, async (tx) => {
        expect((await carrierEventClaim(tx, later(0), 1000)).map((r) => r.id)).not.toContain(mine.id);
      });
      await other.query('ROLLBACK');
      await inRolledBackTx(db.pool, async (tx) => {
        expect((await carrierEventClaim(tx, later(0), 1000)).map((r) => r.id)).toContain(mine.id);
      });
      await db.pool.query('DELETE FROM carrier_events WHERE id = $1', [mine.id]);
    } finally {
      other.release();
    }
  });
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
