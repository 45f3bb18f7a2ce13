// The delivery relay: a first attempt to a healthy endpoint is the delivery row
// itself, claimed in batches with a lease instead of a queued job. Relays racing
// over the same rows attempt each once; a lease is renewed while its attempt
// hangs, and a dead relay's leases run out into another's hands; the claim takes
// no more of an endpoint or an account than its room; the fan-out queues a job
// only for a failing endpoint's delivery and wakes the relay once per transaction.

import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Tx, withTx } from '../../src/db/tx.js';
import { Capacity } from '../../src/delivery/capacity.js';
import { FLOOR_MARGIN_MS, floorOf } from '../../src/db/floor.js';
import {
  DELIVERY_CHANNEL,
  deliveryClaim,
  deliveryLoad,
  deliveryRelayOldest,
  deliveryRelayAt,
  deliverySkipPending,
} from '../../src/delivery/deliveries.sql.js';
import type { DeliveryDeps } from '../../src/delivery/deliver.js';
import { SuccessLog } from '../../src/delivery/successes.js';
import { keyring, newSecretKey } from '../../src/delivery/keyring.js';
import { DELIVERY_RELAY_BATCH, type DeliveryRelay, startDeliveryRelay } from '../../src/delivery/relay.js';
import { emit } from '../../src/outbox/outbox.js';
import { startRelay, type Relay } from '../../src/carrier/relay.js';
import type { HandOffTaker } from '../../src/delivery/handoff.js';
import { retryPolicies } from '../../src/jobs/retry.js';
import { fixture, telnyxCarriers } from '../support/carrier.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createCustomer, type Customer } from '../../src/tools/bench/pipeline.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { onOneConnection, onStatisticsOfNow, pagesRead, rowsRead } from '../support/plan.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

let db: TestDatabase;
const keys = keyring([Buffer.from(newSecretKey(), 'base64')]);
const relays: (DeliveryRelay | Relay)[] = [];
const receivers: Receiver[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop()));
  await db.pool.query(`UPDATE webhook_endpoints SET deleted_at = now(), enabled = false WHERE deleted_at IS NULL`);
  await db.pool.query(`UPDATE webhook_deliveries SET status = 'skipped', relay_after = NULL WHERE status = 'pending'`);
});
afterAll(async () => {
  for (const r of receivers) await r.close();
  await db.drop();
});

/** An account with an endpoint at a fresh receiver. */
async function customer(): Promise<{ receiver: Receiver; c: Customer }> {
  const receiver = await startReceiver();
  receivers.push(receiver);
  const c = await createCustomer(db.pool, keys, receiver.url);
  receiver.secrets = [c.secret];
  return { receiver, c };
}

/** `n` events of the customer's account, emitted in one transaction. */
async function emitMany(c: Customer, n: number): Promise<string[]> {
  return withTx(db.pool, async (tx) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const { eventId } = await emit(tx, {
        accountId: c.accountId,
        tenantId: null,
        type: 'message.delivered',
        subjectId: `msg_${i}`,
        data: { id: `msg_${i}` },
        occurredAt: new Date(),
      });
      ids.push(eventId);
    }
    return ids;
  });
}

const deps = (over: Partial<DeliveryDeps> = {}): DeliveryDeps => ({
  pool: db.pool,
  log: createLogger('silent'),
  metrics: new Metrics({ scrapeToken: null }),
  keys,
  capacity: new Capacity(10),
  successes: new SuccessLog(db.pool),
  retrySchedule: [1000],
  disableAfter: 5,
  allowPrivate: true,
  timeoutMs: 5_000,
  ...over,
});

const relay = (d: DeliveryDeps, leaseMs = 30_000) => {
  const r = startDeliveryRelay({ deliver: d, log: d.log, concurrency: 10, leaseMs, pollIntervalMs: 50 });
  relays.push(r);
  return r;
};

/** A connection listening on `channel`, and the notifications it heard. */
async function hearing(channel: string): Promise<{ heard: string[]; listener: pg.Client }> {
  const listener = new pg.Client({ connectionString: db.url });
  await listener.connect();
  const heard: string[] = [];
  listener.on('notification', (n) => heard.push(n.channel));
  await listener.query(`LISTEN ${channel}`);
  return { heard, listener };
}

/**
 * The pool, recording the statements run through it; `before` runs ahead of each
 * (a delay, to stage a race).
 */
function recording(
  target: pg.Pool,
  before: (text: string) => Promise<void> | void = () => {},
): { pool: pg.Pool; queries: { text: string; values: unknown[] }[] } {
  const queries: { text: string; values: unknown[] }[] = [];
  const pool = new Proxy(target, {
    get(t, key) {
      if (key === 'query') {
        return async (q: unknown, ...rest: unknown[]) => {
          if (typeof q === 'object' && q) {
            const { text, values } = q as { text?: string; values?: unknown[] };
            queries.push({ text: String(text), values: values ?? [] });
            await before(String(text));
          }
          return (t.query as (...a: unknown[]) => unknown).call(t, q, ...rest);
        };
      }
      const v = Reflect.get(t, key);
      return typeof v === 'function' ? v.bind(t) : v;
    },
  });
  return { pool, queries };
}

/** The pool, counting the delivery claims run through it (`before` as for recording). */
function countingClaims(
  target: pg.Pool,
  before?: (text: string) => Promise<void> | void,
): { pool: pg.Pool; claims: () => number } {
  const { pool, queries } = recording(target, before);
  return { pool, claims: () => queries.filter((q) => q.text.startsWith('WITH due AS')).length };
}

const jobsOfDeliveries = () =>
  count(db.pool, `SELECT * FROM graphile_worker.jobs WHERE task_identifier = 'delivery.attempt'`);
/** A claim's room with no endpoint or account busy: `limit` rows, up to 10 of any one. */
const anyRoom = (limit: number) => ({
  limit,
  endpoints: [],
  endpointRooms: [],
  accounts: [],
  accountRooms: [],
  perEndpoint: 10,
  perAccount: 10,
});

const ofEvents = (ids: string[]) =>
  db.pool
    .query<{ status: string; attempts: number; relay_after: Date | null }>(
      'SELECT status, attempts, relay_after FROM webhook_deliveries WHERE event_id = ANY ($1) ORDER BY id',
      [ids],
    )
    .then((r) => r.rows);

describe('the delivery relay', () => {
  it('three relays racing over the same deliveries attempt each exactly once, with no job queued', async () => {
    const { receiver, c } = await customer();
    const ids = await emitMany(c, 150);
    expect(await jobsOfDeliveries()).toBe(0);
    expect((await ofEvents(ids)).every((d) => d.relay_after !== null)).toBe(true);
    for (let i = 0; i < 3; i++) relay(deps());
    await eventually(async () => (await ofEvents(ids)).every((d) => d.status === 'succeeded'), 30_000);
    const ids2 = receiver.received.map((r) => r.headers['webhook-id']);
    expect(ids2.length).toBe(150);
    expect(new Set(ids2)).toEqual(new Set(ids));
    expect(receiver.received.every((r) => r.verifiedWith[0])).toBe(true);
    expect((await ofEvents(ids)).every((d) => d.attempts === 1 && d.relay_after === null)).toBe(true);
    expect(await jobsOfDeliveries()).toBe(0);
  });

  it('a lease is renewed while its attempt hangs past it: no other relay sends the event again', async () => {
    const { receiver, c } = await customer();
    receiver.answer = async () => {
      await new Promise((r) => setTimeout(r, 1_500));
      return { status: 200 };
    };
    const [id] = await emitMany(c, 1);
    relay(deps(), 300);
    await eventually(async () => receiver.received.length === 1, 10_000);
    relay(deps(), 300); // a second relay, polling while the first attempt hangs for five leases
    await eventually(async () => (await ofEvents([id!]))[0]!.status === 'succeeded', 10_000);
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.received.length).toBe(1);
  });

  it('a dead relay’s leases run out and another relay sends those deliveries, with the same webhook-id', async () => {
    const { receiver, c } = await customer();
    const ids = await emitMany(c, 5);
    // A relay that claimed them and died before attempting any.
    const now = new Date();
    const claimed = await deliveryClaim(db.pool, now, new Date(now.getTime() + 700), anyRoom(50));
    expect(claimed).toHaveLength(5);
    const t0 = Date.now();
    relay(deps());
    await eventually(async () => (await ofEvents(ids)).every((d) => d.status === 'succeeded'), 10_000);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(500); // not before the leases ran out
    expect(receiver.received.map((r) => r.headers['webhook-id']).sort()).toEqual([...ids].sort());
  });

  it('a finished attempt whose claim left nothing behind makes no claim: 20 deliveries to a roomy endpoint, a claim or two', async () => {
    const { receiver, c } = await customer();
    const { pool, claims } = countingClaims(db.pool);
    // No poll and no look from the head during the test: each claim is a wake-up's.
    relays.push(
      startDeliveryRelay({
        deliver: deps({ pool, capacity: new Capacity(64) }),
        log: createLogger('silent'),
        concurrency: 50,
        leaseMs: 30_000,
        pollIntervalMs: 60_000,
        floorRefreshMs: 60_000,
      }),
    );
    // Two claims as it starts: its loop's first, and the one its listener's coming up wakes (that one
    // can come late on a loaded machine, and would be counted below).
    await eventually(async () => claims() >= 2, 5_000);
    const ids = await emitMany(c, 20);
    await eventually(async () => (await ofEvents(ids)).every((d) => d.status === 'succeeded'), 10_000);
    expect(receiver.received).toHaveLength(20);
    // The listener's first claim, the emit's notification, and perhaps one more: not one per attempt.
    expect(claims()).toBeLessThanOrEqual(4);
  });

  it('rows a claim passed over for want of room are claimed as a slot frees, with no poll to find them', async () => {
    const { receiver, c } = await customer();
    const ids = await emitMany(c, 6);
    relays.push(
      startDeliveryRelay({
        // One attempt of the endpoint at a time: each claim passes over the rest.
        deliver: deps({ capacity: new Capacity(2) }),
        log: createLogger('silent'),
        concurrency: 10,
        leaseMs: 30_000,
        pollIntervalMs: 60_000,
        floorRefreshMs: 60_000,
      }),
    );
    await eventually(async () => (await ofEvents(ids)).every((d) => d.status === 'succeeded'), 10_000);
    expect(receiver.received).toHaveLength(6);
  });

  it('a lease renewal leaves alone a delivery its attempt handed back meanwhile: it stays due, not leased to nobody', async () => {
    const { c } = await customer();
    const [held, handedBack, retried] = await emitMany(c, 3);
    const now = Date.now();
    const set = (eventId: string, at: number) =>
      db.pool.query('UPDATE webhook_deliveries SET relay_after = $2 WHERE event_id = $1', [eventId, new Date(at)]);
    await set(held!, now + 20_000); // claimed, renewed a third of a lease ago
    await set(handedBack!, now); // no room after all: due again at once
    await set(retried!, now + 1_000); // its attempt failed to run: due again shortly
    const rows = () =>
      db.pool
        .query<{ id: string; event_id: string; relay_after: Date }>(
          'SELECT id, event_id, relay_after FROM webhook_deliveries WHERE event_id = ANY ($1)',
          [[held, handedBack, retried]],
        )
        .then((r) => r.rows);
    const ids = (await rows()).map((d) => d.id);
    // The renewal's snapshot of the attempts in flight was taken before those two were handed back.
    expect(await deliveryRelayAt(db.pool, ids, new Date(now + 30_000), new Date(now + 2_000))).toBe(1);
    const after = new Map((await rows()).map((d) => [d.event_id, d.relay_after]));
    expect(after.get(held!)?.getTime()).toBe(now + 30_000);
    expect(after.get(handedBack!)?.getTime()).toBe(now);
    expect(after.get(retried!)?.getTime()).toBe(now + 1_000);
  });

  // A success batch (deliverySucceedMany) locks its deliveries in id order; a statement
  // locking several of the same rows in the heap's order could deadlock with it, and
  // the victim may be the batch, whose deliveries are then sent again.
  const lockingRowsInIdOrder = async (lockAll: (conn: pg.PoolClient, ids: string[]) => Promise<number>) => {
    const { c } = await customer();
    const events = await emitMany(c, 3);
    await db.pool.query('UPDATE webhook_deliveries SET relay_after = $2 WHERE event_id = ANY ($1)', [
      events,
      new Date(Date.now() + 20_000),
    ]);
    const byId = (
      await db.pool.query<{ id: string }>('SELECT id FROM webhook_deliveries WHERE event_id = ANY ($1) ORDER BY id', [
        events,
      ])
    ).rows.map((r) => r.id);
    // Leave them in the heap out of id order, as concurrent fan-outs and claims do. Where a
    // new row version lands depends on the free space the table has left by then (a version
    // can land before one written earlier), so `lower` is moved again until it is behind another.
    // The success batch holds `lower` and goes on to `higher`; a walk of the heap meets `higher` first.
    const lower = byId[0]!;
    let higher: string | undefined;
    for (let tries = 0; tries < 20 && higher === undefined; tries++) {
      for (const id of tries === 0 ? [...byId].reverse() : [lower]) {
        await db.pool.query('UPDATE webhook_deliveries SET updated_at = now() WHERE id = $1', [id]);
      }
      const byPlace = (
        await db.pool.query<{ id: string }>('SELECT id FROM webhook_deliveries WHERE id = ANY ($1) ORDER BY ctid', [
          byId,
        ])
      ).rows.map((r) => r.id);
      higher = byPlace.slice(0, byPlace.indexOf(lower)).find((id) => id > lower);
    }
    expect(higher, 'a row after `lower` in id order and before it in the heap').toBeDefined();

    const batch = await db.pool.connect();
    const other = await db.pool.connect();
    try {
      await batch.query('BEGIN');
      await batch.query('SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE', [lower]);
      // The plan a statement can get on a grown table's statistics: the heap in its own order.
      await other.query('SET enable_indexscan = off; SET enable_bitmapscan = off');
      const pid = (await other.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const locked = lockAll(other, byId).catch((err: Error) => err.message); // the deadlock's victim, were it one
      await eventually(
        async () =>
          (await count(db.pool, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [
            pid,
          ])) === 1,
        5_000,
      );
      // The batch's next row: the other statement must not hold it while it waits for `lower`.
      await batch.query('SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE', [higher]);
      await batch.query('COMMIT');
      expect(await locked).toBe(3);
    } finally {
      await batch.query('ROLLBACK').catch(() => undefined);
      batch.release();
      other.release(true);
    }
  };

  it('a lease renewal takes its rows in id order, as a success batch does: the two never deadlock', async () => {
    const now = Date.now();
    await lockingRowsInIdOrder((conn, ids) =>
      deliveryRelayAt(conn, ids, new Date(now + 30_000), new Date(now + 2_000)),
    );
  });

  it('a disabled endpoint’s skip takes its rows in id order, as a success batch does: the two never deadlock', async () => {
    await lockingRowsInIdOrder(async (conn, ids) => {
      const endpoint = (
        await conn.query<{ endpoint_id: string }>('SELECT endpoint_id FROM webhook_deliveries WHERE id = $1', [ids[0]])
      ).rows[0]!.endpoint_id;
      await conn.query('BEGIN');
      const skipped = await deliverySkipPending(conn as Tx, endpoint);
      await conn.query('COMMIT');
      return skipped;
    });
  });

  it('a claim takes no more of an endpoint or an account than the room it is given', async () => {
    const a = await customer();
    const b = await customer();
    await emitMany(a.c, 10);
    await emitMany(b.c, 10);
    const now = new Date();
    const lease = new Date(now.getTime() + 60_000);
    const claimedOf = async (room: Parameters<typeof deliveryClaim>[3]) => {
      const claimed = await deliveryClaim(db.pool, now, lease, room);
      const eps = new Map<string, number>();
      for (const w of claimed) {
        expect(w.endpoint.id).toBe(w.delivery.endpoint_id); // each comes with what its attempt needs
        expect(w.event.id).toBe(w.delivery.event_id);
        expect(w.sealedSecrets).toHaveLength(1);
        eps.set(w.endpoint.id, (eps.get(w.endpoint.id) ?? 0) + 1);
      }
      await db.pool.query(`UPDATE webhook_deliveries SET relay_after = $2 WHERE id = ANY ($1)`, [
        claimed.map((w) => w.delivery.id),
        now,
      ]);
      return Object.fromEntries([...eps].map(([id, n]) => [id === a.c.endpointId ? 'a' : 'b', n]));
    };
    const none = { endpoints: [], endpointRooms: [], accounts: [], accountRooms: [] };
    expect(await claimedOf({ limit: 50, ...none, perEndpoint: 2, perAccount: 5 })).toEqual({ a: 2, b: 2 });
    expect(
      await claimedOf({
        limit: 50,
        ...none,
        endpoints: [a.c.endpointId],
        endpointRooms: [1],
        perEndpoint: 3,
        perAccount: 5,
      }),
    ).toEqual({ a: 1, b: 3 });
    expect(
      await claimedOf({
        limit: 50,
        ...none,
        endpoints: [a.c.endpointId],
        endpointRooms: [0],
        accounts: [b.c.accountId],
        accountRooms: [2],
        perEndpoint: 4,
        perAccount: 5,
      }),
    ).toEqual({ b: 2 });
    expect(await claimedOf({ limit: 3, ...none, perEndpoint: 10, perAccount: 10 })).toEqual({ a: 3 });
  });

  it('an endpoint’s first failure hands its waiting deliveries to its lane in that transaction, not one transaction each', async () => {
    const { receiver, c } = await customer();
    let answered = 0;
    receiver.answer = async () => {
      answered++;
      await new Promise((r) => setTimeout(r, 300)); // the claims behind the first attempts see a healthy endpoint
      return { status: 500 };
    };
    const ids = await emitMany(c, 40);
    // Room for 2 attempts of the endpoint at a time: 38 wait as relay rows when the first two fail.
    relay(deps({ capacity: new Capacity(4) }));
    await eventually(async () => (await ofEvents(ids)).every((d) => d.relay_after === null), 10_000);
    const jobs = await db.pool.query<{ created_at: Date; n: number }>(
      `SELECT created_at, count(*)::int AS n FROM graphile_worker.jobs
        WHERE task_identifier = 'delivery.attempt' AND queue_name = $1 GROUP BY created_at ORDER BY n DESC`,
      [`endpoint:${c.endpointId}`],
    );
    // Every delivery is now its lane's: the two that failed got their retries, the rest were handed over.
    expect(jobs.rows.reduce((sum, r) => sum + r.n, 0)).toBe(40);
    // Each transaction stamps its jobs with its own start: the waiting ones went over together.
    expect(jobs.rows[0]!.n).toBeGreaterThanOrEqual(36);
    expect(jobs.rows.length).toBeLessThanOrEqual(4);
    expect(answered).toBeLessThanOrEqual(4);
  });

  it.each([
    [1, 50],
    [DELIVERY_RELAY_BATCH, 400],
  ])(
    'a claim of %i reads its window, not the backlog: 2,000 due deliveries on a table last analyzed empty',
    async (limit, most) => {
      const { c } = await customer();
      // Statistics taken while the table held next to nothing, as on a young table a burst just filled.
      await db.pool.query(`DELETE FROM webhook_attempts`);
      await db.pool.query(`DELETE FROM webhook_deliveries`);
      await db.pool.query(`ANALYZE webhook_deliveries`);
      await emitMany(c, 2_000);
      const now = new Date();
      const read = await rowsRead(db.pool, 'webhook_deliveries', (pool) =>
        deliveryClaim(pool, now, new Date(now.getTime() + 60_000), anyRoom(limit)),
      );
      // A window of four rows per row claimed, each read once or twice: not the 2,000 waiting.
      expect(read).toBeGreaterThan(0);
      expect(read).toBeLessThan(most);
    },
  );

  /**
   * A customer, and a deliveries table as young as a worker's first moments: 20
   * finished deliveries, to be analyzed (onStatisticsOfNow). Statistics that know
   * most deliveries finish (no relay_after): the plan made now is the question, not
   * them.
   */
  const aYoungTable = async () => {
    const { c } = await customer();
    await db.pool.query(`DELETE FROM webhook_attempts`);
    await db.pool.query(`DELETE FROM webhook_deliveries`);
    await emitMany(c, 20);
    await db.pool.query(`UPDATE webhook_deliveries SET status = 'succeeded', attempts = 1, relay_after = NULL`);
    return c;
  };
  const onYoungStatistics = <T>(use: () => Promise<T>) => onStatisticsOfNow(db.pool, 'webhook_deliveries', use);

  // The claim used to be a named statement: its connection kept a generic plan made
  // on the young table, which then scanned the grown one (18,151 rows read here with 3,000; 1.6
  // ms a claim under the pipeline bench). Now it is planned at every run, and claims
  // as the relay makes them, from its floor.
  it('a claim on a connection that ran it while the table was small reads its window, not the 10,000 finished deliveries added since', async () => {
    // As in a busy worker: its connection ran the claim from its first moments,
    // on a young table, which then filled with finished deliveries.
    const c = await aYoungTable();
    await emitMany(c, 2);
    const read = await onYoungStatistics(() =>
      onOneConnection(db.pool, async (client, watch) => {
        // The floor as the relay looks it up (once a second, from the head: not what is measured here).
        const floorNow = async () => {
          const oldest = await deliveryRelayOldest(client);
          return new Date(floorOf(oldest?.getTime() ?? null, new Date(), (at) => at.getTime()));
        };
        const claim = (floor: Date) => {
          const now = new Date();
          return deliveryClaim(client, now, new Date(now.getTime() - 1), anyRoom(1), floor); // a lease already over
        };
        for (let i = 0; i < 10; i++) await claim(await floorNow());
        // Ten thousand: on a table of a few thousand rows a scan costs the planner about as much as the ten
        // primary-key probes it assumes for the lease, and it may take either (seen once in a busy full suite).
        await emitMany(c, 10_000);
        await db.pool.query(
          `UPDATE webhook_deliveries SET status = 'succeeded', attempts = 1, relay_after = NULL WHERE status = 'pending'`,
        );
        // A busy second ago: past the floor's margin, those finished deliveries are below the floor.
        await new Promise((r) => setTimeout(r, FLOOR_MARGIN_MS + 100));
        await emitMany(c, 5);
        const floor = await floorNow();
        return watch('webhook_deliveries', () => claim(floor));
      }),
    );
    // One row claimed from a window of four among five due: a handful read, not the 10,000 finished.
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(50);
  });

  it('a hand-back on a connection that ran it while the table was small reads its own rows, not the 10,000 added since', async () => {
    const c = await aYoungTable();
    const pendingIds = async () =>
      (
        await db.pool.query<{ id: string }>(`SELECT id FROM webhook_deliveries WHERE status = 'pending' ORDER BY id`)
      ).rows.map((r) => r.id);
    const read = await onYoungStatistics(() =>
      onOneConnection(db.pool, async (client, watch) => {
        // As a relay's connection does from its first moments: hand-backs and renewals of a few rows.
        await emitMany(c, 2);
        const few = await pendingIds();
        for (let i = 0; i < 10; i++) await deliveryRelayAt(client, few, new Date());
        await emitMany(c, 10_000);
        await db.pool.query(
          `UPDATE webhook_deliveries SET status = 'succeeded', attempts = 1, relay_after = NULL WHERE status = 'pending'`,
        );
        await emitMany(c, 3);
        const three = await pendingIds();
        return watch('webhook_deliveries', () => deliveryRelayAt(client, three, new Date()));
      }),
    );
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(50);
  });

  it('a claim passing over the backlog of an account with no room reads it once, not once for each row it takes', async () => {
    const full = await aYoungTable();
    const { c: other } = await customer();
    // Taken once the rows exist: a claim's time before some of them were made would find those not yet due.
    let now = new Date();
    const room = {
      ...anyRoom(DELIVERY_RELAY_BATCH),
      endpoints: [full.endpointId],
      endpointRooms: [0],
      accounts: [full.accountId],
      accountRooms: [0],
    };
    const read = await onYoungStatistics(async () => {
      await emitMany(full, 1_000); // due first, and its account has no room
      await emitMany(other, 1_000);
      now = new Date(Date.now() + 1000);
      return rowsRead(db.pool, 'webhook_deliveries', (pool) =>
        deliveryClaim(pool, now, new Date(now.getTime() + 60_000), room),
      );
    });
    const claimed = await deliveryClaim(db.pool, now, new Date(now.getTime() + 60_000), room);
    expect(new Set(claimed.map((w) => w.endpoint.id))).toEqual(new Set([other.endpointId]));
    // The 1,000 passed over, the window and the rows taken: not a walk of the backlog for each row taken.
    expect(read).toBeLessThan(1_500);
  });

  it('a claim from the relay’s floor does not walk the deliveries finished below it', async () => {
    const { c } = await customer();
    // A busy minute: thousands delivered (their relay index entries dead, no VACUUM yet), then one new one.
    await emitMany(c, 3_000);
    await db.pool.query(
      `UPDATE webhook_deliveries SET status = 'succeeded', attempts = 1, relay_after = NULL WHERE status = 'pending'`,
    );
    const floor = new Date(Date.now() - 1); // as the relay's floor would be, once those are past its margin
    const [fresh] = await emitMany(c, 1);
    const now = new Date(Date.now() + 1000);
    // Each measured claim leases with a lease already over, so the row stays to be claimed again.
    const claim = (floor: Date | null) => (pool: Parameters<Parameters<typeof pagesRead>[1]>[0]) =>
      deliveryClaim(pool, now, new Date(now.getTime() - 1), anyRoom(10), floor);
    const fromHead = await pagesRead(db.pool, claim(null));
    const fromFloor = await pagesRead(db.pool, claim(floor));
    const claimed = await deliveryClaim(db.pool, now, new Date(now.getTime() + 60_000), anyRoom(10), floor);
    expect(claimed.map((w) => w.delivery.event_id)).toEqual([fresh]);
    expect(fromHead).toBeGreaterThan(fromFloor * 3);
  });

  it('deliveries due since long before the floor’s margin (a backlog) are all claimed, from the oldest', async () => {
    const { receiver, c } = await customer();
    const ids = await emitMany(c, 30);
    await db.pool.query(
      `UPDATE webhook_deliveries SET relay_after = now() - interval '10 minutes' WHERE event_id = ANY ($1)`,
      [ids],
    );
    relay(deps());
    await eventually(async () => (await ofEvents(ids)).every((d) => d.status === 'succeeded'), 10_000);
    expect(new Set(receiver.received.map((r) => r.headers['webhook-id']))).toEqual(new Set(ids));
  });

  it('the fan-out queues a job only for a failing endpoint’s delivery, and wakes the relay once per transaction', async () => {
    const healthy = await customer();
    const failing = await customer();
    await db.pool.query('UPDATE webhook_endpoints SET consecutive_failures = 2 WHERE id = $1', [failing.c.endpointId]);
    const { heard, listener } = await hearing(DELIVERY_CHANNEL);
    try {
      const ids = await emitMany(healthy.c, 3);
      const lane = await emitMany(failing.c, 2);
      await eventually(async () => heard.length >= 1, 5_000);
      await new Promise((r) => setTimeout(r, 200));
      expect(heard).toEqual([DELIVERY_CHANNEL]); // the failing endpoint's transaction gave the relay nothing
      expect((await ofEvents(ids)).every((d) => d.relay_after !== null)).toBe(true);
      expect((await ofEvents(lane)).every((d) => d.relay_after === null)).toBe(true);
      expect(
        await count(
          db.pool,
          `SELECT * FROM graphile_worker.jobs WHERE task_identifier = 'delivery.attempt' AND queue_name = $1`,
          [`endpoint:${failing.c.endpointId}`],
        ),
      ).toBe(2);
    } finally {
      await listener.end();
    }
  });
});

/** Stores `n` delivery receipts as ingest would, each with its own event id, together. */
async function receipts(n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, (_, i) => `handoff-${Date.now()}-${i}`);
  const payloads = ids.map((id) => {
    const body = JSON.parse(fixture('message-finalized-delivered'));
    body.data.id = id;
    return JSON.stringify(body);
  });
  // One statement, so a relay polling meanwhile finds them all in one batch.
  await db.pool.query(
    `INSERT INTO carrier_events (carrier_event_id, event_type, payload)
     SELECT id, 'message.finalized', payload::jsonb FROM unnest($1::text[], $2::text[]) AS r (id, payload)`,
    [ids, payloads],
  );
  return ids;
}

/**
 * A worker's carrier-event relay whose handler does `also`, then emits one customer
 * event per receipt, handing its deliveries to `taker`.
 */
function carrierRelay(
  c: Customer,
  taker: HandOffTaker,
  also: (tx: Tx, carrierEventId: string) => Promise<void> = async () => {},
) {
  const delivered = (tx: Tx, id: string) =>
    emit(tx, {
      accountId: c.accountId,
      tenantId: null,
      type: 'message.delivered',
      subjectId: id,
      data: { id },
      occurredAt: new Date(),
    });
  const r = startRelay({
    process: {
      pool: db.pool,
      carriers: telnyxCarriers(),
      handlers: {
        'message.receipt': async (tx, _event, ctx) => {
          await also(tx, ctx.carrierEventId);
          await delivered(tx, ctx.carrierEventId);
          return { outcome: 'applied' };
        },
      },
      log: createLogger('silent'),
      notReady: retryPolicies(3000).notReady,
    },
    log: createLogger('silent'),
    metrics: new Metrics({ defaultMetrics: false }),
    loops: 1,
    batchSize: 10,
    handOff: taker,
  });
  relays.push(r);
  return r;
}

const deliveriesOf = (c: Customer) =>
  db.pool
    .query<{ id: string; event_id: string; status: string; attempts: number; relay_after: Date | null }>(
      `SELECT id, event_id, status, attempts, relay_after FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id`,
      [c.endpointId],
    )
    .then((r) => r.rows);

/** A delivery relay that neither polls nor looks from the head during a test: it claims only when woken. */
const quietRelay = (d: DeliveryDeps, concurrency = 10) => {
  const r = startDeliveryRelay({
    deliver: d,
    log: createLogger('silent'),
    concurrency,
    leaseMs: 30_000,
    pollIntervalMs: 60_000,
    floorRefreshMs: 60_000,
  });
  relays.push(r);
  return r;
};

describe('the hand-off from a carrier-event batch to its worker’s delivery relay', () => {
  it('the deliveries a batch fans out are attempted once by that worker’s relay, with no claim and no wake-up', async () => {
    const { receiver, c } = await customer();
    const { pool, claims } = countingClaims(db.pool);
    const deliveries = quietRelay(deps({ pool }));
    // Two claims as it starts: its loop's first, and the one its listener's coming up wakes (that one
    // can come late on a loaded machine, and would be counted below).
    await eventually(async () => claims() >= 2, 5_000);
    const claimsBefore = claims();
    const { heard, listener } = await hearing(DELIVERY_CHANNEL);
    try {
      carrierRelay(c, deliveries);
      const ids = await receipts(5);
      await eventually(
        async () => (await deliveriesOf(c)).filter((d) => d.status === 'succeeded').length === 5,
        10_000,
      );
      expect(receiver.received.map((r) => JSON.parse(r.body).data.id).sort()).toEqual([...ids].sort());
      expect((await deliveriesOf(c)).every((d) => d.attempts === 1 && d.relay_after === null)).toBe(true);
      expect(claims()).toBe(claimsBefore);
      expect(heard).toEqual([]);
    } finally {
      await listener.end();
    }
  });

  it('a delivery emitted in a savepoint that rolled back is never attempted; the event’s kept one is', async () => {
    const { receiver, c } = await customer();
    const deliveries = quietRelay(deps());
    carrierRelay(c, deliveries, async (tx, id) => {
      await withTx(tx, async (sp) => {
        await emit(sp, {
          accountId: c.accountId,
          tenantId: null,
          type: 'message.failed',
          subjectId: id,
          data: { id, undone: true },
          occurredAt: new Date(),
        });
        throw new Error('rolled back, and the handler goes on');
      }).catch(() => undefined);
    });
    const ids = await receipts(3);
    await eventually(async () => (await deliveriesOf(c)).filter((d) => d.status === 'succeeded').length === 3, 10_000);
    await new Promise((r) => setTimeout(r, 200)); // room for an attempt that should not be
    expect(receiver.received.map((r) => JSON.parse(r.body).type)).toEqual(Array(3).fill('message.delivered'));
    expect(receiver.received.map((r) => JSON.parse(r.body).data.id).sort()).toEqual([...ids].sort());
    expect(await deliveriesOf(c)).toHaveLength(3);
  });

  it('deliveries handed to a worker that dies before attempting them are sent by another relay once their lease runs out', async () => {
    const { receiver, c } = await customer();
    const dead: HandOffTaker = { leaseUntil: () => new Date(Date.now() + 1_000), take: () => undefined };
    carrierRelay(c, dead);
    await receipts(3);
    await eventually(async () => (await deliveriesOf(c)).length === 3, 10_000);
    // Leased to the dead worker: due to nobody yet.
    expect((await deliveriesOf(c)).every((d) => d.status === 'pending' && d.relay_after! > new Date())).toBe(true);
    relay(deps());
    await eventually(async () => (await deliveriesOf(c)).every((d) => d.status === 'succeeded'), 10_000);
    const sent = receiver.received.map((r) => r.headers['webhook-id']);
    expect(sent.sort()).toEqual((await deliveriesOf(c)).map((d) => d.event_id).sort());
  });

  it('what a relay is handed beyond its room it hands back, and claims as its slots free: each attempted once', async () => {
    const { receiver, c } = await customer();
    let inFlight = 0;
    let most = 0;
    receiver.answer = async () => {
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, 50));
      inFlight--;
      return { status: 200 };
    };
    const deliveries = quietRelay(deps(), 2);
    carrierRelay(c, deliveries);
    await receipts(8);
    await eventually(async () => (await deliveriesOf(c)).filter((d) => d.status === 'succeeded').length === 8, 10_000);
    expect(new Set(receiver.received.map((r) => r.headers['webhook-id'])).size).toBe(8);
    expect(receiver.received).toHaveLength(8);
    expect((await deliveriesOf(c)).every((d) => d.attempts === 1)).toBe(true);
    expect(most).toBeLessThanOrEqual(2);
  });

  it('what a batch hands over beyond its endpoint’s share is handed back in one statement, and none is loaded', async () => {
    const { receiver, c } = await customer();
    const { pool, queries } = recording(db.pool);
    const capacity = new Capacity(4); // an endpoint not yet heard from fast: 2 at once
    const deliveries = quietRelay(deps({ pool, capacity }));
    carrierRelay(c, deliveries);
    await receipts(8);
    await eventually(async () => (await deliveriesOf(c)).filter((d) => d.status === 'succeeded').length === 8, 10_000);
    // The six beyond the share handed back together, and nothing loaded: the fan-out gave the relay the work.
    const handedBack = queries
      .filter((q) => q.text.startsWith('WITH held AS'))
      .map((q) => (q.values[0] as string[]).length);
    expect(handedBack[0]).toBe(6);
    expect(queries.filter((q) => q.text.includes('row_to_json(d.*)') && !q.text.startsWith('WITH due'))).toEqual([]);
    expect(receiver.received).toHaveLength(8);
    expect((await deliveriesOf(c)).every((d) => d.attempts === 1)).toBe(true);
  });

  it('deliveries handed to a relay that has stopped are handed back at once, neither attempted nor left leased', async () => {
    const { receiver, c } = await customer();
    const events = await emitMany(c, 3);
    await db.pool.query(
      `UPDATE webhook_deliveries SET relay_after = now() + interval '30 s' WHERE event_id = ANY ($1)`,
      [events],
    );
    const works = await Promise.all((await deliveriesOf(c)).map((d) => deliveryLoad(db.pool, d.id)));
    const deliveries = quietRelay(deps());
    await deliveries.stop();
    deliveries.take(works.map((w) => w!));
    await eventually(async () => (await deliveriesOf(c)).every((d) => d.relay_after! <= new Date()), 5_000);
    expect((await deliveriesOf(c)).every((d) => d.status === 'pending' && d.attempts === 0)).toBe(true);
    expect(receiver.received).toHaveLength(0);
  });

  it('a delivery handed back after the claim a freed slot woke is claimed at once, not at the next poll', async () => {
    const { receiver, c } = await customer();
    const events = await emitMany(c, 6);
    // Leased to this relay, as a batch hands them over.
    await db.pool.query(
      `UPDATE webhook_deliveries SET relay_after = now() + interval '30 s' WHERE event_id = ANY ($1)`,
      [events],
    );
    // Hand-backs that commit only after the attempts beside them finished, and the claim those woke found nothing.
    const { pool, claims } = countingClaims(db.pool, async (text) => {
      if (text.startsWith('WITH held AS')) await new Promise((r) => setTimeout(r, 300));
    });
    const deliveries = quietRelay(deps({ pool, capacity: new Capacity(4) })); // 2 at once to the endpoint
    await eventually(async () => claims() >= 1, 5_000);
    // Handed over: two are attempted at once, and the four beyond the endpoint's share are handed back.
    const works = await Promise.all((await deliveriesOf(c)).map((d) => deliveryLoad(db.pool, d.id)));
    deliveries.take(works.map((w) => w!));
    await eventually(async () => (await deliveriesOf(c)).every((d) => d.status === 'succeeded'), 10_000);
    expect(receiver.received).toHaveLength(6);
  });
});
