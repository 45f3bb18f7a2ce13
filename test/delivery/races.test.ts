// Delivery outcomes recorded at the same moment for one endpoint: they lock the
// endpoint row before any delivery row, so they never deadlock, and a success
// landing after another attempt disabled the endpoint re-arms nothing.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { Capacity } from '../../src/delivery/capacity.js';
import { SuccessLog } from '../../src/delivery/successes.js';
import { deliveryTask } from '../../src/delivery/deliver.js';
import { emit } from '../../src/outbox/outbox.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { testKeys } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

let db: TestDatabase;
let receiver: Receiver;
let accountId: string;

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startReceiver();
  accountId = (await db.pool.query(`INSERT INTO accounts (name) VALUES ('races') RETURNING id`)).rows[0].id;
});
afterAll(async () => {
  await receiver.close();
  await db.drop();
});

const task = (disableAfter: number) =>
  deliveryTask({
    pool: db.pool,
    log: createLogger('silent'),
    metrics: new Metrics({ defaultMetrics: false }),
    retrySchedule: [60_000],
    disableAfter,
    allowPrivate: true,
    timeoutMs: 5000,
    keys: testKeys,
    capacity: new Capacity(10),
    successes: new SuccessLog(db.pool),
  });
const job = { jobId: '1', attempts: 1, maxAttempts: 25, inSerialQueue: true, abortSignal: undefined };

/** Two deliveries to one fresh endpoint, both answered at the same instant with `status`. */
async function twoAtOnce(status: (n: number) => number, disableAfter: number) {
  const { rows } = await db.pool.query(`INSERT INTO webhook_endpoints (account_id, url) VALUES ($1, $2) RETURNING id`, [
    accountId,
    receiver.url,
  ]);
  const endpointId: string = rows[0].id;
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const { eventId } = await withTx(db.pool, (tx) =>
      emit(tx, {
        accountId,
        tenantId: null,
        type: 'message.sent',
        subjectId: `msg_${i}`,
        data: {},
        occurredAt: new Date(),
      }),
    );
    ids.push(
      (
        await db.pool.query('SELECT id FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2', [
          eventId,
          endpointId,
        ])
      ).rows[0].id,
    );
  }
  await db.pool.query(`DELETE FROM graphile_worker._private_jobs`); // this test runs the task itself
  let arrived = 0;
  let release!: () => void;
  const both = new Promise<void>((r) => (release = r));
  receiver.answer = async (n) => {
    if (++arrived === 2) release();
    await both;
    return { status: status(n) };
  };
  const run = task(disableAfter);
  const results = await Promise.allSettled(ids.map((deliveryId) => run({ deliveryId, trigger: 'scheduled' }, job)));
  return { endpointId, ids, results };
}

describe('concurrent delivery outcomes', () => {
  it('two 410s at once to one endpoint disable it once, with both attempts recorded and no deadlock', async () => {
    for (let round = 0; round < 8; round++) {
      const { endpointId, ids, results } = await twoAtOnce(() => 410, 100);
      expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
      const ep = (
        await db.pool.query(
          'SELECT enabled, disabled_reason, consecutive_failures FROM webhook_endpoints WHERE id = $1',
          [endpointId],
        )
      ).rows[0];
      expect(ep).toEqual({ enabled: false, disabled_reason: 'gone', consecutive_failures: 2 });
      const attempts = await db.pool.query(
        'SELECT count(*)::int AS n FROM webhook_attempts WHERE delivery_id = ANY ($1)',
        [ids],
      );
      expect(attempts.rows[0].n).toBe(2);
    }
  });

  it('a success landing after a failure disabled the endpoint stays skipped and does not reset the count', async () => {
    for (let round = 0; round < 3; round++) {
      const { rows } = await db.pool.query(
        `INSERT INTO webhook_endpoints (account_id, url) VALUES ($1, $2) RETURNING id`,
        [accountId, receiver.url],
      );
      const endpointId: string = rows[0].id;
      const ids: string[] = [];
      const eventIds: string[] = [];
      for (let i = 0; i < 2; i++) {
        const { eventId } = await withTx(db.pool, (tx) =>
          emit(tx, {
            accountId,
            tenantId: null,
            type: 'message.sent',
            subjectId: `msg_s${i}`,
            data: {},
            occurredAt: new Date(),
          }),
        );
        eventIds.push(eventId);
        ids.push(
          (
            await db.pool.query('SELECT id FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2', [
              eventId,
              endpointId,
            ])
          ).rows[0].id,
        );
      }
      await db.pool.query(`DELETE FROM graphile_worker._private_jobs`);
      // The first event's attempt fails at once (the threshold is 1: it disables the
      // endpoint); the second's 200 is held until the endpoint is disabled.
      receiver.answer = async (_n, req) => {
        if (req.headers['webhook-id'] === eventIds[0]) return { status: 500 };
        await waitUntil(
          async () =>
            !(await db.pool.query('SELECT enabled FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0].enabled,
        );
        return { status: 200 };
      };
      const run = task(1);
      const results = await Promise.allSettled(ids.map((deliveryId) => run({ deliveryId, trigger: 'scheduled' }, job)));
      expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
      const ep = (
        await db.pool.query('SELECT enabled, consecutive_failures FROM webhook_endpoints WHERE id = $1', [endpointId])
      ).rows[0];
      expect(ep).toEqual({ enabled: false, consecutive_failures: 1 });
      const late = (await db.pool.query('SELECT status, attempts FROM webhook_deliveries WHERE id = $1', [ids[1]]))
        .rows[0];
      expect(late).toEqual({ status: 'skipped', attempts: 1 }); // its 2xx is logged, but it stays skipped for redelivery
    }
  });
});

describe('an endpoint re-enabled while its delivery is being skipped', () => {
  it('the skip sees the re-enable (it locks the endpoint and checks in the statement): the delivery is not skipped, and the next run delivers it', async () => {
    const { rows } = await db.pool.query(
      `INSERT INTO webhook_endpoints (account_id, url) VALUES ($1, $2) RETURNING id`,
      [accountId, receiver.url],
    );
    const endpointId: string = rows[0].id;
    const { eventId } = await withTx(db.pool, (tx) =>
      emit(tx, {
        accountId,
        tenantId: null,
        type: 'message.sent',
        subjectId: 'msg_reenable',
        data: {},
        occurredAt: new Date(),
      }),
    );
    const deliveryId: string = (
      await db.pool.query('SELECT id FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2', [
        eventId,
        endpointId,
      ])
    ).rows[0].id;
    await db.pool.query(`DELETE FROM graphile_worker._private_jobs`);
    await db.pool.query(
      `UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'manual', disabled_at = now() WHERE id = $1`,
      [endpointId],
    );
    receiver.answer = () => ({ status: 200 });

    // The customer's re-enable is in flight (row locked, not committed) when the job reads the endpoint as disabled.
    const patch = await db.pool.connect();
    try {
      await patch.query('BEGIN');
      await patch.query(
        `UPDATE webhook_endpoints SET enabled = true, disabled_reason = NULL, disabled_at = NULL WHERE id = $1`,
        [endpointId],
      );
      const run = task(100)({ deliveryId, trigger: 'scheduled' }, job);
      const settled = run.then(
        () => 'done',
        (err: Error) => err.message,
      );
      await waitUntil(
        async () =>
          (
            await db.pool.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
            )
          ).rows[0].n > 0,
      );
      await patch.query('COMMIT');
      expect(await settled).toMatch(/changed while delivery .* was being skipped/);
    } finally {
      patch.release();
    }
    expect(
      (await db.pool.query('SELECT status FROM webhook_deliveries WHERE id = $1', [deliveryId])).rows[0].status,
    ).toBe('pending');
    const before = receiver.received.length;
    await task(100)({ deliveryId, trigger: 'scheduled' }, job);
    expect(
      (await db.pool.query('SELECT status FROM webhook_deliveries WHERE id = $1', [deliveryId])).rows[0].status,
    ).toBe('succeeded');
    expect(receiver.received.slice(before).map((r) => r.headers['webhook-id'])).toEqual([eventId]);
  });
});

describe('what a receiver answers is recorded whatever its bytes', () => {
  it('a response body with NUL bytes (gzip, UTF-16, binary) is kept with U+FFFD, and the delivery finishes succeeded with one attempt', async () => {
    const { rows } = await db.pool.query(
      `INSERT INTO webhook_endpoints (account_id, url) VALUES ($1, $2) RETURNING id`,
      [accountId, receiver.url],
    );
    const endpointId: string = rows[0].id;
    const { eventId } = await withTx(db.pool, (tx) =>
      emit(tx, {
        accountId,
        tenantId: null,
        type: 'message.sent',
        subjectId: 'msg_nul',
        data: {},
        occurredAt: new Date(),
      }),
    );
    const deliveryId: string = (
      await db.pool.query('SELECT id FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2', [
        eventId,
        endpointId,
      ])
    ).rows[0].id;
    await db.pool.query(`DELETE FROM graphile_worker._private_jobs`);
    receiver.answer = () => ({ status: 200, body: Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x6f, 0x6b]) });
    await task(100)({ deliveryId, trigger: 'scheduled' }, job);
    expect(
      (await db.pool.query('SELECT status, attempts FROM webhook_deliveries WHERE id = $1', [deliveryId])).rows[0],
    ).toEqual({ status: 'succeeded', attempts: 1 });
    const excerpt: string = (
      await db.pool.query('SELECT response_excerpt FROM webhook_attempts WHERE delivery_id = $1', [deliveryId])
    ).rows[0].response_excerpt;
    expect(excerpt).toContain('\ufffdok');
    expect(excerpt).not.toContain('\u0000');
  });
});

async function waitUntil(check: () => Promise<boolean>) {
  for (let i = 0; i < 200 && !(await check()); i++) await new Promise((r) => setTimeout(r, 25));
}
