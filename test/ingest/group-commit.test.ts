// Group commit: concurrent webhooks share one statement, and every one of them
// still gets exactly the answer it would have got alone: stored once, pending (a
// stored event is its own processing job), a duplicate (even inside the same
// batch) stores nothing, a body the database refuses fails alone, a failed write
// fails everyone in it, and a batch wakes the relays once.
// The queue behind a write is bounded: a webhook that finds it full is refused at
// once, over HTTP a 503 counted in the metrics.

import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CARRIER_EVENT_CHANNEL, carrierEventStoreMany, type NewCarrierEvent } from '../../src/carrier/events.sql.js';
import { isBadInput } from '../../src/db/errors.js';
import type { AddressInfo } from 'node:net';
import { telnyxAdapter } from '../../src/carrier/telnyx/adapter.js';
import { QueueFullError } from '../../src/db/group-commit.js';
import { CarrierEventWriter } from '../../src/ingest/group-commit.js';
import { buildIngestServer } from '../../src/ingest/server.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { envelope, postWebhook, telnyxKeys } from '../support/carrier.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';

let db: TestDatabase;

const event = (id: string, body = envelope(id)): NewCarrierEvent => ({
  carrier: 'telnyx',
  carrierEventId: id,
  eventType: 'message.finalized',
  subject: null,
  rawJson: body,
});
const events = () => count(db.pool, 'SELECT * FROM carrier_events');
/** Stored events due for processing: each one is its own processing job (the relay claims it). */
const jobs = () => count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL AND run_after IS NULL');

/** The pool, counting the statements sent through it. */
function counted(pool: pg.Pool): { pool: pg.Pool; statements: () => number } {
  let n = 0;
  const proxy = new Proxy(pool, {
    get(target, prop, receiver) {
      if (prop === 'query') {
        return (...args: unknown[]) => {
          n++;
          return (target.query as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      return Reflect.get(target, prop, receiver) as unknown;
    },
  });
  return { pool: proxy, statements: () => n };
}

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE carrier_events');
  await db.pool.query('DELETE FROM graphile_worker._private_jobs');
});

describe('group commit', () => {
  it('a lone webhook is written at once, in a statement of its own', async () => {
    const c = counted(db.pool);
    const writer = new CarrierEventWriter(c.pool);
    expect(await writer.store(event('alone'))).toMatchObject({ stored: true });
    expect(c.statements()).toBe(1);
    expect(await jobs()).toBe(1);
  });

  it('webhooks arriving while a write is in flight share the next one: each stored once, pending', async () => {
    const c = counted(db.pool);
    const writer = new CarrierEventWriter(c.pool, { maxInFlight: 1 });
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => writer.store(event(`e${i}`))));
    expect(results.every((r) => r.stored)).toBe(true);
    expect(new Set(results.map((r) => (r.stored ? r.id : ''))).size).toBe(60);
    expect(c.statements()).toBe(2); // the first alone, the other 59 together
    expect(await events()).toBe(60);
    expect(await jobs()).toBe(60);
  });

  it('duplicates inside one batch and of stored events insert nothing', async () => {
    const writer = new CarrierEventWriter(db.pool, { maxInFlight: 1 });
    await writer.store(event('old'));
    const results = await Promise.all([
      writer.store(event('first')), // written alone
      ...Array.from({ length: 10 }, () => writer.store(event('same'))), // one batch, one key
      writer.store(event('old')),
    ]);
    expect(results.filter((r) => r.stored)).toHaveLength(2); // 'first' and one 'same'
    expect(results[1]!.stored).toBe(true); // the first request with the key is the one stored
    expect(results.slice(2, 11).every((r) => !r.stored)).toBe(true);
    expect(results[11]!.stored).toBe(false);
    expect(await events()).toBe(3);
    expect(await jobs()).toBe(3);
  });

  it('a body the database refuses fails alone; the rest of its batch is stored', async () => {
    const writer = new CarrierEventWriter(db.pool, { maxInFlight: 1 });
    const settled = await Promise.allSettled([
      writer.store(event('opener')),
      writer.store(event('good1')),
      writer.store(event('nul', envelope('nul', 'message.received', { text: 'a\u0000b' }))),
      writer.store(event('good2')),
    ]);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
    expect(isBadInput((settled[2] as PromiseRejectedResult).reason)).toBe(true);
    expect(await events()).toBe(3);
    expect(await jobs()).toBe(3);
  });

  it('when the write fails, nobody in the batch is answered as stored and nothing is stored', async () => {
    await db.pool.query(
      `CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'storage unavailable'; END $$`,
    );
    await db.pool.query(
      `CREATE TRIGGER refuse_event BEFORE INSERT ON carrier_events FOR EACH ROW EXECUTE FUNCTION refuse_event()`,
    );
    try {
      const writer = new CarrierEventWriter(db.pool, { maxInFlight: 1 });
      const settled = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => writer.store(event(`f${i}`))));
      expect(settled.every((s) => s.status === 'rejected')).toBe(true);
      expect(await events()).toBe(0);
      expect(await jobs()).toBe(0);
    } finally {
      await db.pool.query('DROP TRIGGER refuse_event ON carrier_events; DROP FUNCTION refuse_event()');
    }
  });

  it('a batch that stored something wakes the relays with one notification; a batch of duplicates with none', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (m) => heard.push(m.channel));
    await listener.query(`LISTEN ${CARRIER_EVENT_CHANNEL}`);
    try {
      const settle = async () => {
        await listener.query('SELECT 1'); // notifications committed before this round trip have arrived
        return heard.splice(0).length;
      };
      await carrierEventStoreMany(
        db.pool,
        Array.from({ length: 25 }, (_, i) => event(`n${i}`)),
      );
      expect(await settle()).toBe(1);
      await carrierEventStoreMany(
        db.pool,
        Array.from({ length: 25 }, (_, i) => event(`n${i}`)),
      );
      expect(await settle()).toBe(0);
      await carrierEventStoreMany(db.pool, [event('n0'), event('n-new')]);
      expect(await settle()).toBe(1);
    } finally {
      await listener.end();
    }
  });

  it('a batch never exceeds its size limits', async () => {
    const c = counted(db.pool);
    const writer = new CarrierEventWriter(c.pool, { maxInFlight: 1, maxBatch: 10 });
    await Promise.all(Array.from({ length: 31 }, (_, i) => writer.store(event(`b${i}`))));
    expect(c.statements()).toBe(4); // 1 + 10 + 10 + 10
    expect(await events()).toBe(31);
  });

  it('two batches in flight carrying the same events in opposite orders wait for each other, never deadlock', async () => {
    for (let round = 0; round < 15; round++) {
      const ids = Array.from({ length: 20 }, (_, i) => `r${round}-${i}`);
      const forward = ids.map((id) => event(id));
      const backward = [...forward].reverse();
      const [a, b] = await Promise.all([
        carrierEventStoreMany(db.pool, forward),
        carrierEventStoreMany(db.pool, backward),
      ]);
      expect(a.filter((r) => r.stored).length + b.filter((r) => r.stored).length).toBe(20);
    }
    expect(await jobs()).toBe(await events());
  });
});

describe('a bounded queue', () => {
  it('a webhook that finds the queue full is refused at once, while the ones queued before it wait and are then stored', async () => {
    const writer = new CarrierEventWriter(db.pool, { maxInFlight: 1, maxQueue: 3 });
    const lock = await lockCarrierEvents();
    let stored: Promise<unknown[]>;
    try {
      const inFlight = watched(writer.store(event('q-in-flight')));
      const queued = [1, 2, 3].map((i) => watched(writer.store(event(`q-queued-${i}`))));
      expect(writer.waiting).toBe(3);
      const refused = [1, 2].map((i) => watched(writer.store(event(`q-refused-${i}`))));
      await Promise.allSettled(refused.map((w) => w.promise));
      // refused while the write in flight still waits for the lock
      expect(refused.map((w) => w.settled)).toEqual(['rejected', 'rejected']);
      expect(refused.every((w) => w.reason instanceof QueueFullError)).toBe(true);
      expect([inFlight, ...queued].map((w) => w.settled)).toEqual([null, null, null, null]);
      stored = Promise.all([inFlight, ...queued].map((w) => w.promise));
    } finally {
      await lock.release();
    }
    expect((await stored).every((r) => (r as { stored: boolean }).stored)).toBe(true);
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'q-refused-%'`)).toBe(0);
    // with room again, the same writer takes webhooks again
    expect(await writer.store(event('q-after'))).toMatchObject({ stored: true });
    expect(await events()).toBe(5);
  });

  it('over HTTP a full queue answers 503 at once, counted as queue_full; nothing refused is stored', async () => {
    const keys = telnyxKeys();
    const metrics = new Metrics({ defaultMetrics: false });
    const app = buildIngestServer({
      pool: db.pool,
      carriers: new Map([['telnyx', telnyxAdapter({ publicKey: keys.publicKeyBase64, toleranceSeconds: 300 })]]),
      log: createLogger('silent'),
      metrics,
      groupCommit: { maxInFlight: 1, maxQueue: 2 },
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/webhooks/telnyx`;
    const metric = async (name: string, outcome?: string) => {
      const values = (await metrics.registry.getSingleMetric(name)?.get())?.values ?? [];
      return values.find((v) => outcome === undefined || v.labels['outcome'] === outcome)?.value ?? 0;
    };
    const lock = await lockCarrierEvents();
    try {
      const first = watched(postWebhook(url, keys, envelope('h-0')));
      await until(async () => (await lockWaiters()) === 1); // the write in flight is blocked on the lock
      const waiting = [1, 2].map((i) => watched(postWebhook(url, keys, envelope(`h-${i}`))));
      await until(async () => (await metric('handset_ingest_queued_webhooks')) === 2);
      const refused = await Promise.all([3, 4, 5].map((i) => postWebhook(url, keys, envelope(`h-${i}`))));
      expect(refused.map((r) => [r.status, r.json])).toEqual(
        Array(3).fill([503, { error: 'unavailable', detail: 'try again' }]),
      );
      // answered while the three before them still wait for the lock
      expect([first, ...waiting].map((w) => w.settled)).toEqual([null, null, null]);
      expect(await metric('handset_ingest_requests_total', 'queue_full')).toBe(3);
      await lock.release();
      const answered = await Promise.all([first, ...waiting].map((w) => w.promise));
      expect(answered.map((r) => r.status)).toEqual([200, 200, 200]);
    } finally {
      await lock.release();
      await app.close();
    }
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id IN ('h-3', 'h-4', 'h-5')`)).toBe(
      0,
    );
    expect(await events()).toBe(3);
  });
});

/** Holds carrier_events locked against inserts, in a test transaction of its own, until release(). */
async function lockCarrierEvents(): Promise<{ release: () => Promise<void> }> {
  const client = await db.pool.connect();
  await client.query('BEGIN');
  await client.query('LOCK TABLE carrier_events IN EXCLUSIVE MODE');
  let released = false;
  return {
    release: async () => {
      if (released) return;
      released = true;
      await client.query('ROLLBACK');
      client.release();
    },
  };
}

/** Statements of this database waiting for a lock on carrier_events. */
const lockWaiters = () =>
  count(
    db.pool,
    `SELECT * FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
      WHERE c.relname = 'carrier_events' AND NOT l.granted
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );

async function until(condition: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error('condition not met');
}

/** The promise, and whether it has settled yet (and how). */
function watched<T>(promise: Promise<T>) {
  const w = { settled: null as 'fulfilled' | 'rejected' | null, reason: undefined as unknown, promise };
  promise.then(
    () => {
      w.settled = 'fulfilled';
    },
    (err: unknown) => {
      w.settled = 'rejected';
      w.reason = err;
    },
  );
  return w;
}
