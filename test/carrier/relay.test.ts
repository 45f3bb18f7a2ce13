// The relay claims stored carrier events in batches and commits each batch once;
// an event that waits or fails rolls back only itself, an event that breaks the
// batch's transaction is found and postponed alone, and ingest's notification
// wakes the relay without waiting for its poll.

import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CARRIER_EVENT_CHANNEL, carrierEventIdAt, carrierEventStoreMany } from '../../src/carrier/events.sql.js';
import type { HandlerRegistry } from '../../src/carrier/process.js';
import { startRelay, type Relay } from '../../src/carrier/relay.js';
import { createPool } from '../../src/db/pool.js';
import type { Tx } from '../../src/db/tx.js';
import { retryPolicies } from '../../src/jobs/retry.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { fixture, telnyxCarriers } from '../support/carrier.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';

let db: TestDatabase;
/** The relay's own connections pipeline, as a worker's do. */
let relayPool: pg.Pool;
const relays: Relay[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
  relayPool = createPool(db.url, { max: 10, applicationName: 'handset-relay-test', pipeline: true });
  await db.pool.query('CREATE TABLE effects (event text)');
});
afterEach(async () => {
  await Promise.all(relays.splice(0).map((r) => r.stop()));
});
afterAll(async () => {
  await relayPool.end();
  await db.drop();
});

/** A delivery receipt stored under its own event id (not ingest's notifying statement unless asked). */
const receipt = (id: string) => {
  const body = JSON.parse(fixture('message-finalized-delivered'));
  body.data.id = id;
  return JSON.stringify(body);
};
const insert = async (ids: string[]) => {
  for (const id of ids) {
    await db.pool.query(
      `INSERT INTO carrier_events (carrier_event_id, event_type, payload) VALUES ($1, 'message.finalized', $2::jsonb)`,
      [id, receipt(id)],
    );
  }
};
/** A receipt stored with an id made at `at`: as a slow commit, or a host whose clock is behind, stores it. */
const insertFrom = (at: Date, id: string, n = 0) =>
  db.pool.query(
    `INSERT INTO carrier_events (id, carrier_event_id, event_type, payload) VALUES ($1, $2, 'message.finalized', $3::jsonb)`,
    [`${carrierEventIdAt(at)}${String(n).padStart(16, '0')}`, id, receipt(id)],
  );
/** How many of these events are still unprocessed. */
const unprocessed = (ids: string[]) =>
  count(db.pool, 'SELECT * FROM carrier_events WHERE carrier_event_id = ANY($1) AND processed_at IS NULL', [ids]);
/** The relay holds its LISTEN connection (and so is past its start-up claim). */
const listening = () =>
  eventually(
    async () =>
      (await count(
        db.pool,
        `SELECT * FROM pg_stat_activity WHERE application_name = 'handset-relay-listen' AND query LIKE 'LISTEN%'`,
      )) === 1,
  );
const row = async (id: string) =>
  (
    await db.pool.query(
      'SELECT processed_at, error, attempts, run_after FROM carrier_events WHERE carrier_event_id = $1',
      [id],
    )
  ).rows[0];
const effects = (id: string) => count(db.pool, 'SELECT * FROM effects WHERE event = $1', [id]);

/** A receipt handler that records its effect, after `before` has had its say about the event. */
const recording =
  (before: (tx: Tx, carrierEventId: string) => Promise<void> = async () => {}): HandlerRegistry['message.receipt'] =>
  async (tx, _event, ctx) => {
    await before(tx, ctx.carrierEventId);
    await tx.query('INSERT INTO effects VALUES ($1)', [ctx.carrierEventId]);
    return { outcome: 'applied' };
  };

function start(
  handlers: HandlerRegistry,
  o: { pollIntervalMs?: number; fullClaimIntervalMs?: number; loops?: number; batchSize?: number } = {},
) {
  const metrics = new Metrics({ defaultMetrics: false });
  const relay = startRelay({
    process: {
      pool: relayPool,
      carriers: telnyxCarriers(),
      handlers,
      log: createLogger('silent'),
      notReady: retryPolicies(3000).notReady,
    },
    log: createLogger('silent'),
    metrics,
    loops: 1,
    batchSize: 10,
    ...o,
  });
  relays.push(relay);
  return metrics;
}

describe('the carrier-event relay', () => {
  it('a handler that throws rolls back only its own event; the others claimed with it apply once', async () => {
    const ids = ['t-1', 't-2', 't-boom', 't-3'].map((id) => `${id}-${Date.now()}`);
    await insert(ids);
    const metrics = start({
      'message.receipt': async (tx, _event, ctx) => {
        await tx.query('INSERT INTO effects VALUES ($1)', [ctx.carrierEventId]);
        if (ctx.carrierEventId.startsWith('t-boom')) throw new Error('the downstream row is busy');
        return { outcome: 'applied' };
      },
    });
    for (const id of ids.filter((i) => !i.startsWith('t-boom'))) {
      await eventually(async () => (await row(id)).processed_at);
      expect(await effects(id)).toBe(1);
    }
    const boom = ids[2]!;
    const failed = await eventually(async () => ((await row(boom)).attempts > 0 ? row(boom) : null));
    expect(failed).toMatchObject({ processed_at: null, error: 'Error: the downstream row is busy' });
    expect(failed.run_after.getTime()).toBeGreaterThan(Date.now() - 1000);
    const runs = (await metrics.carrierEvents.get()).values;
    expect(runs.find((v) => v.labels.outcome === 'applied')?.value).toBe(3);
    expect(runs.find((v) => v.labels.outcome === 'failed')?.value).toBeGreaterThanOrEqual(1);
    // The failed run's insert went with its savepoint; each retry's did too.
    expect(await effects(boom)).toBe(0);
  });

  it('an event that breaks its batch’s connection is postponed alone; the rest of its batch applies once', async () => {
    const ids = ['p-1', 'p-poison', 'p-2', 'p-3'].map((id) => `${id}-${Date.now()}`);
    await insert(ids);
    start({
      'message.receipt': recording(async (tx, id) => {
        if (id.startsWith('p-poison')) await tx.query('SELECT pg_terminate_backend(pg_backend_pid())');
      }),
    });
    for (const id of ids.filter((i) => !i.startsWith('p-poison'))) {
      await eventually(async () => (await row(id)).processed_at);
      expect(await effects(id)).toBe(1);
    }
    const poison = ids[1]!;
    const postponed = await eventually(async () => ((await row(poison)).attempts > 0 ? row(poison) : null));
    expect(postponed.processed_at).toBeNull();
    expect(postponed.error).toMatch(/connection|terminat/i);
    expect(await effects(poison)).toBe(0);
  });

  it('an event its batch has already run is not pending to the events after it, though it is marked processed only at commit', async () => {
    await db.pool.query(`UPDATE carrier_events SET processed_at = now() WHERE processed_at IS NULL`);
    const subject = `carrier-msg-${Date.now()}`;
    const [first, second] = ['mate-1', 'mate-2'].map((id) => `${id}-${Date.now()}`) as [string, string];
    for (const [n, id] of [first, second].entries()) {
      await db.pool.query(
        `INSERT INTO carrier_events (id, carrier_event_id, event_type, payload, subject)
         VALUES ($1, $2, 'message.finalized', $3::jsonb, $4)`,
        [`${carrierEventIdAt(new Date())}${String(n).padStart(16, '0')}`, id, receipt(id), subject],
      );
    }
    const pendingToSecond: boolean[] = [];
    start({
      'message.receipt': async (_tx, _event, ctx) => {
        if (ctx.carrierEventId === first) return { outcome: 'ignored', reason: 'nothing to do' };
        pendingToSecond.push(await ctx.pendingAbout('message.receipt', subject));
        return { outcome: 'applied' };
      },
    });
    await eventually(async () => (await unprocessed([first, second])) === 0);
    // One batch ran both (nothing else was due), and the first had settled when the second asked.
    expect(pendingToSecond).toEqual([false]);
  });

  it('an event ingest stores is applied at once on its notification, not at the next poll', async () => {
    start({ 'message.receipt': recording() }, { pollIntervalMs: 60_000 });
    // Listening, and past its start-up claim: from here only a notification (or the poll, 60 s away) wakes it.
    await listening();
    await new Promise((r) => setTimeout(r, 300));
    const loud = `n-loud-${Date.now()}`;
    await carrierEventStoreMany(db.pool, [
      {
        carrier: 'telnyx',
        carrierEventId: loud,
        eventType: 'message.finalized',
        subject: null,
        rawJson: receipt(loud),
      },
    ]);
    // Well before the 60 s poll: the notification woke it.
    await eventually(async () => (await row(loud)).processed_at, 10_000);
    expect(await effects(loud)).toBe(1);
  });

  it('an event stored below the floor (a slow commit, a clock behind) is applied by the next claim from the head, not at the next poll', async () => {
    // Its first claim is from the head; the notification's, within 5 s of it, from the floor that one set.
    start({ 'message.receipt': recording() }, { pollIntervalMs: 60_000, fullClaimIntervalMs: 5_000 });
    await listening();
    const late = `n-late-${Date.now()}`;
    await insertFrom(new Date(Date.now() - 60_000), late, 1);
    await db.pool.query(`NOTIFY ${CARRIER_EVENT_CHANNEL}`);
    // Not at the poll, a minute away: the relay came back for a claim from the head when one was due.
    await eventually(async () => (await row(late)).processed_at, 15_000);
    expect(await effects(late)).toBe(1);
  });

  it('a backlog older than the floor’s margin is claimed from its own head on, not one claim from the head at a time', async () => {
    await db.pool.query(`UPDATE carrier_events SET processed_at = now() WHERE processed_at IS NULL`);
    // A minute's backlog (ids from a minute ago), and claims from the head only once a minute.
    const ids = Array.from({ length: 120 }, (_, i) => `backlog-${i}-${Date.now()}`);
    const minuteAgo = new Date(Date.now() - 60_000);
    for (const [i, id] of ids.entries()) await insertFrom(minuteAgo, id, i);
    start({ 'message.receipt': recording() }, { pollIntervalMs: 60_000, fullClaimIntervalMs: 60_000, batchSize: 10 });
    // The first claim (from the head) found the backlog's oldest event; the next eleven go on from there.
    await eventually(async () => (await unprocessed(ids)) === 0, 10_000);
    expect(await count(db.pool, 'SELECT * FROM effects WHERE event = ANY($1)', [ids])).toBe(ids.length);
  });

  it('three relays of two loops racing over the same stored events apply each exactly once', async () => {
    const ids = Array.from({ length: 150 }, (_, i) => `race-${i}-${Date.now()}`);
    // Earlier tests' postponed events fall due while this one runs and would be counted
    // as applied with these: they are not this test's.
    // (Found here: t-boom and p-poison of the tests above, applied by these relays and counted.)
    await db.pool.query(`UPDATE carrier_events SET processed_at = now() WHERE processed_at IS NULL`);
    // Stored before any relay starts, so every loop's first claim sees all of them.
    await insert(ids);
    const metrics = [1, 2, 3].map(() => start({ 'message.receipt': recording() }, { loops: 2, batchSize: 5 }));
    await eventually(async () => (await unprocessed(ids)) === 0);
    expect(
      await count(db.pool, 'SELECT event FROM effects WHERE event = ANY($1) GROUP BY event HAVING count(*) = 1', [ids]),
    ).toBe(ids.length);
    expect(await count(db.pool, 'SELECT * FROM effects WHERE event = ANY($1)', [ids])).toBe(ids.length);
    // Each relay took a share: the claims are disjoint, not one loop doing it all while the others wait.
    const applied = await Promise.all(
      metrics.map(
        async (m) => (await m.carrierEvents.get()).values.find((v) => v.labels.outcome === 'applied')?.value ?? 0,
      ),
    );
    expect(applied.reduce((a, b) => a + b, 0)).toBe(ids.length);
    expect(applied.filter((n) => n > 0).length).toBeGreaterThan(1);
  });

  it('a relay stopped while it backs off after failed batches stops at once, not when the backoff ends', async () => {
    // A database that refuses every connection: each batch fails, and the backoff doubles from 100 ms.
    const dead = createPool('postgres://postgres@127.0.0.1:1/none', { max: 1, applicationName: 'relay-dead' });
    let failures = 0;
    const log = createLogger('warn', {
      write: (line: string) => {
        if (line.includes('carrier event batch rolled back')) failures++;
      },
    });
    const relay = startRelay({
      process: { pool: dead, carriers: telnyxCarriers(), handlers: {}, log, notReady: retryPolicies(3000).notReady },
      log,
      metrics: new Metrics({ defaultMetrics: false }),
      loops: 1,
    });
    try {
      // After the sixth failure the loop sleeps 3.2 s before the next claim.
      await eventually(async () => failures >= 6, 15_000, 5);
      const asked = performance.now();
      await relay.stop();
      expect(performance.now() - asked).toBeLessThan(1_500);
    } finally {
      await dead.end();
    }
  });
});
