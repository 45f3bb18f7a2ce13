// The same rules through each shipped driver: pg (built in) and postgres.js
// (the example store in examples/inbox-receiver). A write through the handler's
// transaction handle commits with the remembered id, or rolls back with it.

import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { postgresStore } from '../../../examples/inbox-receiver/postgres-store.js';
import { createInbox, type InboxEvent, type InboxOptions, type Outcome, type RawBody } from '../src/index.js';
import {
  customerDatabase,
  effects,
  handsetEvent,
  newEndpointSecret,
  quietErrors,
  recordEffect,
  remembered,
  sign,
  type CustomerDatabase,
} from './support.js';

let db: CustomerDatabase;
let sql: postgres.Sql;
const secret = newEndpointSecret();

beforeAll(async () => {
  db = await customerDatabase();
  sql = postgres(db.url, { max: 25, onnotice: () => {} });
  await createInbox({ pool: db.pool, secret }).migrate();
});
afterAll(async () => {
  await sql.end();
  await db.drop();
});

interface Driver {
  receive(
    options: Partial<InboxOptions>,
    delivery: { body: RawBody; headers: Record<string, string> },
    after?: (event: InboxEvent, failing: () => Promise<unknown>) => unknown,
  ): Promise<Outcome>;
}

const drivers: Record<string, () => Driver> = {
  pg: () => ({
    receive: (options, delivery, after) =>
      createInbox({ pool: db.pool, secret, ...quietErrors, ...options }).receive(
        delivery,
        async (event, tx: pg.PoolClient) => {
          await recordEffect(event, tx);
          await after?.(event, () => tx.query('SELECT 1/0'));
        },
      ),
  }),
  'postgres.js': () => ({
    receive: (options, delivery, after) =>
      createInbox({ store: postgresStore(sql), secret, ...quietErrors, ...options }).receive(
        delivery,
        async (event, tx) => {
          const data = event.data as { id?: string; sequence?: number };
          await tx`INSERT INTO effects (event_id, subject, sequence, stale)
                 VALUES (${event.id}, ${data.id ?? null}, ${data.sequence ?? null}, ${event.stale})`;
          await after?.(event, () => tx`SELECT 1/0`);
        },
      ),
  }),
};

describe.each(Object.keys(drivers))('through %s', (name) => {
  const driver = drivers[name]!();

  it('a replay ×5 runs the handler once', async () => {
    const event = handsetEvent();
    const results: string[] = [];
    for (let i = 0; i < 5; i++) results.push((await driver.receive({}, sign(event, secret))).result);
    expect(results).toEqual(['handled', 'duplicate', 'duplicate', 'duplicate', 'duplicate']);
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('when the handler throws after writing, its write rolls back with the inbox row; the next delivery is handled', async () => {
    const event = handsetEvent();
    const before = await remembered(db.pool);
    const failed = await driver.receive({}, sign(event, secret), () => {
      throw new Error('after the write');
    });
    expect([failed.status, failed.result]).toEqual([500, 'handler_failed']);
    expect(await effects(db.pool, event.id)).toBe(0);
    expect(await remembered(db.pool)).toBe(before);
    expect((await driver.receive({}, sign(event, secret))).result).toBe('handled');
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('a handler that catches a failed statement and returns: 500, nothing kept', async () => {
    const event = handsetEvent();
    const outcome = await driver.receive({}, sign(event, secret), async (_event, failing) => {
      await failing().catch(() => undefined);
    });
    expect([outcome.status, outcome.result]).toEqual([500, 'handler_failed']);
    expect(await effects(db.pool, event.id)).toBe(0);
    expect((await driver.receive({}, sign(event, secret))).result).toBe('handled');
  });

  it('15 concurrent copies, at serializable too: one effect, no 5xx', async () => {
    for (const isolation of [undefined, 'serializable'] as const) {
      const event = handsetEvent();
      const outcomes = await Promise.all(
        Array.from({ length: 15 }, () => driver.receive(isolation ? { isolation } : {}, sign(event, secret))),
      );
      expect({ isolation, statuses: outcomes.map((o) => o.status) }).toEqual({
        isolation,
        statuses: Array(15).fill(200),
      });
      expect(await effects(db.pool, event.id)).toBe(1);
    }
  });

  it('skip-stale and prune work through it', async () => {
    const subject = `msg_${name.replace('.', '')}`;
    const newer = handsetEvent({ data: { id: subject, sequence: 5 } });
    const older = handsetEvent({ data: { id: subject, sequence: 4 } });
    expect((await driver.receive({}, sign(newer, secret))).result).toBe('handled');
    expect((await driver.receive({}, sign(older, secret))).result).toBe('stale');
    const inbox =
      name === 'pg' ? createInbox({ pool: db.pool, secret }) : createInbox({ store: postgresStore(sql), secret });
    await db.pool.query(`UPDATE handset_inbox SET received_at = now() - interval '40 days' WHERE event_id = $1`, [
      newer.id,
    ]);
    expect(await inbox.prune({ olderThan: '30d' })).toBe(1);
  });
});
