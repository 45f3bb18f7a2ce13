// Successful attempts are recorded in batches (one statement, one commit each):
// every attempt is counted and logged once, numbered after its delivery's earlier
// attempts, and a delivery that left pending meanwhile keeps its status.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { deliverySucceedMany, type SucceededAttempt } from '../../src/delivery/deliveries.sql.js';
import { SuccessLog } from '../../src/delivery/successes.js';
import { emit } from '../../src/outbox/outbox.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { onOneConnection, rowsRead } from '../support/plan.js';

let db: TestDatabase;
let accountId: string;

beforeAll(async () => {
  db = await createTestDatabase();
  accountId = (await db.pool.query(`INSERT INTO accounts (name) VALUES ('successes') RETURNING id`)).rows[0].id;
  // the deliveries below go to this one endpoint (emit fans out to it)
  await db.pool.query(`INSERT INTO webhook_endpoints (account_id, url) VALUES ($1, 'http://127.0.0.1:9/x')`, [
    accountId,
  ]);
});
afterAll(async () => {
  await db.drop();
});

/** n pending deliveries to the endpoint. */
async function pending(n: number): Promise<string[]> {
  return withTx(db.pool, async (tx) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const { eventId } = await emit(tx, {
        accountId,
        tenantId: null,
        type: 'message.sent',
        subjectId: `msg_${i}`,
        data: {},
        occurredAt: new Date(),
      });
      const { rows } = await tx.query('SELECT id FROM webhook_deliveries WHERE event_id = $1', [eventId]);
      ids.push(rows[0].id);
    }
    return ids;
  });
}

const success = (deliveryId: string): SucceededAttempt => ({
  delivery_id: deliveryId,
  trigger: 'scheduled',
  url: 'http://127.0.0.1:9/x',
  started_at: new Date(),
  duration_ms: 3,
  response_status: 200,
  response_excerpt: 'ok',
});

const rowsOf = (ids: string[]) =>
  db.pool
    .query<{ id: string; status: string; attempts: number; relay_after: Date | null; logged: number[] }>(
      `SELECT d.id, d.status, d.attempts, d.relay_after,
              (SELECT array_agg(a.attempt ORDER BY a.attempt) FROM webhook_attempts a WHERE a.delivery_id = d.id) AS logged
         FROM webhook_deliveries d WHERE d.id = ANY ($1) ORDER BY d.id`,
      [ids],
    )
    .then((r) => r.rows);

describe('recording successes in batches', () => {
  it('a batch finishes each pending delivery once, numbering its attempt after the earlier ones', async () => {
    const ids = await pending(5);
    // Two of them failed once before: their success is attempt 2.
    await db.pool.query(`UPDATE webhook_deliveries SET attempts = 1 WHERE id = ANY ($1)`, [ids.slice(0, 2)]);
    await db.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, attempt, trigger, url, started_at, duration_ms, response_status, error)
       SELECT id, 1, 'scheduled', 'http://127.0.0.1:9/x', now(), 5, 500, 'HTTP 500' FROM unnest($1::text[]) AS id`,
      [ids.slice(0, 2)],
    );
    expect(await deliverySucceedMany(db.pool, [...ids].reverse().map(success))).toEqual([true, true, true, true, true]);
    const rows = await rowsOf(ids);
    expect(rows.map((r) => [r.status, r.attempts, r.relay_after, r.logged])).toEqual([
      ['succeeded', 2, null, [1, 2]],
      ['succeeded', 2, null, [1, 2]],
      ['succeeded', 1, null, [1]],
      ['succeeded', 1, null, [1]],
      ['succeeded', 1, null, [1]],
    ]);
    // Recorded again (a second copy of the same success): logged, but finishes nothing.
    expect(await deliverySucceedMany(db.pool, [success(ids[4]!)])).toEqual([false]);
    expect((await rowsOf([ids[4]!]))[0]).toMatchObject({ status: 'succeeded', attempts: 2, logged: [1, 2] });
  });

  it('a delivery skipped while its success waits for the row keeps skipped; the attempt is still logged', async () => {
    const [skipped, other] = await pending(2);
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`UPDATE webhook_deliveries SET status = 'skipped', relay_after = NULL WHERE id = $1`, [
        skipped,
      ]);
      // The batch's snapshot still reads the delivery pending; it must judge by the row it updates.
      const recorded = deliverySucceedMany(db.pool, [success(skipped!), success(other!)]);
      await new Promise((r) => setTimeout(r, 200));
      await blocker.query('COMMIT');
      expect(await recorded).toEqual([false, true]);
    } finally {
      blocker.release();
    }
    expect((await rowsOf([skipped!, other!])).map((r) => [r.status, r.attempts, r.logged])).toEqual([
      ['skipped', 1, [1]],
      ['succeeded', 1, [1]],
    ]);
  });

  it('a batch reads its own deliveries, not the backlog: 10 successes among 2,000 pending on a table last analyzed empty', async () => {
    // Statistics taken while the table held next to nothing, as on a young table a burst just filled.
    await db.pool.query(`DELETE FROM webhook_attempts`);
    await db.pool.query(`DELETE FROM webhook_deliveries`);
    await db.pool.query(`ANALYZE webhook_deliveries`);
    const ids = await pending(2_000);
    const read = await rowsRead(db.pool, 'webhook_deliveries', (pool) =>
      deliverySucceedMany(pool, ids.slice(0, 10).map(success)),
    );
    expect(read).toBeGreaterThanOrEqual(10);
    expect(read).toBeLessThan(50);
  });

  it('a batch on a connection that recorded successes while the table was small reads its own deliveries, not the 3,000 added since', async () => {
    // As in a busy worker: its connection recorded successes from its first
    // moments, on a young table, which then filled with more deliveries.
    await db.pool.query(`DELETE FROM webhook_attempts`);
    await db.pool.query(`DELETE FROM webhook_deliveries`);
    const early = await pending(20);
    await db.pool.query(`ANALYZE webhook_deliveries`);
    const read = await onOneConnection(db.pool, async (client, watch) => {
      for (const id of early) await deliverySucceedMany(client, [success(id)]);
      const ids = await pending(3_000);
      return watch('webhook_deliveries', () => deliverySucceedMany(client, ids.slice(0, 2).map(success)));
    });
    expect(read).toBeGreaterThanOrEqual(2);
    expect(read).toBeLessThan(50);
  });

  it('successes arriving together share a commit: 200 of them take far fewer statements than one each', async () => {
    const ids = await pending(200);
    const log = new SuccessLog(db.pool);
    const statements = () =>
      db.pool
        .query<{ n: string }>(`SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()`)
        .then((r) => Number(r.rows[0]!.n));
    const before = await statements();
    const finished = await Promise.all(ids.map((id) => log.record(success(id))));
    const commits = (await statements()) - before;
    expect(finished.every(Boolean)).toBe(true);
    expect(
      await count(db.pool, `SELECT * FROM webhook_deliveries WHERE id = ANY ($1) AND status = 'succeeded'`, [ids]),
    ).toBe(200);
    expect(await count(db.pool, `SELECT * FROM webhook_attempts WHERE delivery_id = ANY ($1)`, [ids])).toBe(200);
    // One write in flight and 100 a batch: a handful of commits, plus the ones counting them here.
    expect(commits).toBeLessThan(20);
  });
});
