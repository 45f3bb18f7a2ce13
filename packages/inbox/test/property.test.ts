// The inbox's promise as a property: whatever mix of duplicates, reorders,
// concurrent copies and handler failures N events arrive in, once each has been
// delivered until it succeeded (as the sender's retries do), the business state
// is what applying each event once, in sequence order, gives.

import { AsyncLocalStorage } from 'node:async_hooks';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { createInbox, type InboxEvent, type Ordering } from '../src/index.js';
import {
  customerDatabase,
  handsetEvent,
  newEndpointSecret,
  post,
  serve,
  sign,
  type CustomerDatabase,
  type Served,
} from './support.js';

let db: CustomerDatabase;
const secret = newEndpointSecret();
const servers: Served[] = [];
const url: Partial<Record<Ordering, string>> = {};
/** Whether the delivery being handled must fail: set per request, from a header outside the signature. */
const failThis = new AsyncLocalStorage<boolean>();

beforeAll(async () => {
  db = await customerDatabase(40);
  await db.pool.query(`CREATE TABLE balances (subject text PRIMARY KEY, total bigint NOT NULL)`);
  await db.pool.query(
    `CREATE TABLE snapshots (subject text PRIMARY KEY, sequence bigint NOT NULL, status text NOT NULL)`,
  );
  for (const ordering of ['skip-stale', 'deliver-stale'] as const) {
    const inbox = createInbox({
      pool: db.pool,
      secret,
      ordering,
      table: `inbox_${ordering.replace('-', '_')}`,
      onError: () => {},
    });
    await inbox.migrate();
    const handle = async (event: InboxEvent, tx: pg.PoolClient) => {
      const data = event.data as { id: string; sequence: number; status: string; amount: number };
      // Every event counts once toward its subject's balance (an effect on each transition)…
      await tx.query('INSERT INTO effects (event_id, subject, sequence, amount, stale) VALUES ($1, $2, $3, $4, $5)', [
        event.id,
        data.id,
        data.sequence,
        data.amount,
        event.stale,
      ]);
      await tx.query(
        `INSERT INTO balances (subject, total) VALUES ($1, $2) ON CONFLICT (subject) DO UPDATE SET total = balances.total + $2`,
        [data.id, data.amount],
      );
      // …and the newest state wins the snapshot.
      if (!event.stale) {
        await tx.query(
          `INSERT INTO snapshots (subject, sequence, status) VALUES ($1, $2, $3)
           ON CONFLICT (subject) DO UPDATE SET sequence = $2, status = $3`,
          [data.id, data.sequence, data.status],
        );
      }
    };
    const node = inbox.nodeHandler(async (event, tx) => {
      await handle(event, tx);
      if (failThis.getStore()) throw new Error('this delivery fails');
    });
    const served = await serve((req, res) => failThis.run(req.headers['x-fail'] === '1', () => node(req, res)));
    servers.push(served);
    url[ordering] = served.url;
  }
});
afterAll(async () => {
  for (const s of servers) await s.close();
  await db.drop();
});

interface Figures {
  runs: number;
  events: number;
  deliveries: number;
  duplicates: number;
  reorders: number;
  concurrent: number;
  failures: number;
  effects: number;
}

const STATUSES = ['queued', 'sent', 'delivered', 'failed'];

/** N events over a few subjects, each subject's sequences 1, 2, 3… in the order they happened. */
const scenario = fc
  .record({
    subjects: fc.integer({ min: 1, max: 4 }),
    kinds: fc.array(fc.record({ subject: fc.nat(3), amount: fc.integer({ min: 1, max: 100 }) }), {
      minLength: 1,
      maxLength: 16,
    }),
  })
  .chain(({ subjects, kinds }) =>
    fc.record({
      subjects: fc.constant(subjects),
      kinds: fc.constant(kinds),
      // Waves of deliveries: each wave's run at the same moment; any event, any number of times, some failing.
      waves: fc.array(
        fc.array(fc.record({ event: fc.nat(kinds.length - 1), fail: fc.boolean() }), { minLength: 1, maxLength: 5 }),
        { maxLength: kinds.length * 2 },
      ),
      // Then the sender's retries: every event again, in some order, until it succeeds.
      retryOrder: fc.shuffledSubarray([...kinds.keys()], { minLength: kinds.length, maxLength: kinds.length }),
    }),
  );

async function check(ordering: Ordering, figures: Figures): Promise<void> {
  await fc.assert(
    fc.asyncProperty(scenario, async ({ subjects, kinds, waves, retryOrder }) => {
      const run = Math.random().toString(36).slice(2, 10);
      const bySubject = new Map<string, number>();
      const events = kinds.map(({ subject, amount }) => {
        const id = `sub_${run}_${subject % subjects}`;
        const sequence = (bySubject.get(id) ?? 0) + 1;
        bySubject.set(id, sequence);
        return handsetEvent({ data: { id, sequence, amount, status: STATUSES[sequence % STATUSES.length]! } });
      });
      const deliver = async (i: number, fail: boolean) => {
        const delivery = sign(events[i]!, secret);
        const headers = fail ? { ...delivery.headers, 'x-fail': '1' } : delivery.headers;
        return (await post(url[ordering]!, { body: delivery.body, headers })).status;
      };
      const delivered = new Set<number>();
      const highest = new Map<string, number>();
      for (const wave of waves) {
        figures.concurrent += wave.length > 1 ? wave.length : 0;
        for (const { event, fail } of wave) {
          const data = events[event]!.data as { id: string; sequence: number };
          if (delivered.has(event)) figures.duplicates++;
          if ((highest.get(data.id) ?? 0) > data.sequence) figures.reorders++;
          highest.set(data.id, Math.max(highest.get(data.id) ?? 0, data.sequence));
          delivered.add(event);
          if (fail) figures.failures++;
        }
        figures.deliveries += wave.length;
        await Promise.all(wave.map(({ event, fail }) => deliver(event, fail)));
      }
      for (const i of retryOrder) {
        if (delivered.has(i)) figures.duplicates++;
        figures.deliveries++;
        expect(await deliver(i, false)).toBe(200);
      }
      figures.runs++;
      figures.events += events.length;

      // Applying each event once, in sequence order.
      const expected = new Map<string, { total: number; sequence: number; status: string }>();
      for (const e of events) {
        const d = e.data as { id: string; sequence: number; amount: number; status: string };
        const before = expected.get(d.id) ?? { total: 0, sequence: 0, status: '' };
        expected.set(d.id, { total: before.total + d.amount, sequence: d.sequence, status: d.status });
      }
      const { rows: snaps } = await db.pool.query<{ subject: string; sequence: string; status: string }>(
        'SELECT subject, sequence, status FROM snapshots WHERE subject LIKE $1',
        [`sub_${run}_%`],
      );
      expect(new Map(snaps.map((s) => [s.subject, { sequence: Number(s.sequence), status: s.status }]))).toEqual(
        new Map([...expected].map(([k, v]) => [k, { sequence: v.sequence, status: v.status }])),
      );
      const { rows: runs } = await db.pool.query<{ event_id: string; n: number }>(
        'SELECT event_id, count(*)::int AS n FROM effects WHERE subject LIKE $1 GROUP BY event_id',
        [`sub_${run}_%`],
      );
      figures.effects += runs.reduce((n, r) => n + r.n, 0);
      expect(runs.every((r) => r.n === 1)).toBe(true);
      if (ordering === 'deliver-stale') {
        // Every event handled exactly once: the balances are the sums.
        expect(runs.length).toBe(events.length);
        const { rows: balances } = await db.pool.query<{ subject: string; total: string }>(
          'SELECT subject, total FROM balances WHERE subject LIKE $1',
          [`sub_${run}_%`],
        );
        expect(new Map(balances.map((b) => [b.subject, Number(b.total)]))).toEqual(
          new Map([...expected].map(([k, v]) => [k, v.total])),
        );
      }
    }),
    { numRuns: Number(process.env['INBOX_PROPERTY_RUNS'] ?? 30) },
  );
}

describe('any interleaving of duplicates, reorders, concurrent copies and failures', () => {
  for (const ordering of ['deliver-stale', 'skip-stale'] as const) {
    it(`${ordering}: ends in the state of each event applied once, in sequence order`, async () => {
      const figures: Figures = {
        runs: 0,
        events: 0,
        deliveries: 0,
        duplicates: 0,
        reorders: 0,
        concurrent: 0,
        failures: 0,
        effects: 0,
      };
      await check(ordering, figures);
      console.info(`inbox property (${ordering}): ${JSON.stringify(figures)}`);
      expect(figures.duplicates).toBeGreaterThan(0);
      expect(figures.reorders).toBeGreaterThan(0);
      expect(figures.failures).toBeGreaterThan(0);
    }, 240_000);
  }
});
