// Delivery outcomes recorded at the same moment for one endpoint: they lock the
// endpoint row before any delivery row, so they never deadlock, and a success
// landing after another attempt disabled the endpoint re-arms nothing.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { deliveryTask } from '../../src/delivery/deliver.js';
import { emit } from '../../src/outbox/outbox.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
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
    parallelPerEndpoint: 10,
  });
const job = { jobId: '1', attempts: 1, maxAttempts: 25, inSerialQueue: true, abortSignal: undefined };

/** Two deliveries to one fresh endpoint, both answered at the same instant with `status`. */
async function twoAtOnce(status: (n: number) => number, disableAfter: number) {
  const { rows } = await db.pool.query(`INSERT INTO webhook_endpoints (account_id, url, secret) VALUES ($1, $2, 'whsec_c2VjcmV0') RETURNING id`, [accountId, receiver.url]);
  const endpointId: string = rows[0].id;
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const { eventId } = await withTx(db.pool, (tx) => emit(tx, { accountId, tenantId: null, type: 'message.sent', subjectId: `msg_${i}`, data: {}, occurredAt: new Date() }));
    ids.push((await db.pool.query('SELECT id FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2', [eventId, endpointId])).rows[0].id);
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
      const ep = (await db.pool.query('SELECT enabled, disabled_reason, consecutive_failures FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0];
      expect(ep).toEqual({ enabled: false, disabled_reason: 'gone', consecutive_failures: 2 });
      const attempts = await db.pool.query('SELECT count(*)::int AS n FROM webhook_attempts WHERE delivery_id = ANY ($1)', [ids]);
      expect(attempts.rows[0].n).toBe(2);
    }
  });

  it('a success landing after a failure disabled the endpoint stays skipped and does not reset the count', async () => {
    for (let round = 0; round < 3; round++) {
      const { rows } = await db.pool.query(`INSERT INTO webhook_endpoints (account_id, url, secret) VALUES ($1, $2, 'whsec_c2VjcmV0') RETURNING id`, [accountId, receiver.url]);
      const endpointId: string = rows[0].id;
      const ids: string[] = [];
      const eventIds: string[] = [];
      for (let i = 0; i < 2; i++) {
        const { eventId } = await withTx(db.pool, (tx) => emit(tx, { accountId, tenantId: null, type: 'message.sent', subjectId: `msg_s${i}`, data: {}, occurredAt: new Date() }));
        eventIds.push(eventId);
        ids.push((await db.pool.query('SELECT id FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2', [eventId, endpointId])).rows[0].id);
      }
      await db.pool.query(`DELETE FROM graphile_worker._private_jobs`);
      // The first event's attempt fails at once (the threshold is 1: it disables the
      // endpoint); the second's 200 is held until the endpoint is disabled.
      receiver.answer = async (_n, req) => {
        if (req.headers['webhook-id'] === eventIds[0]) return { status: 500 };
        await waitUntil(async () => !(await db.pool.query('SELECT enabled FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0].enabled);
        return { status: 200 };
      };
      const run = task(1);
      const results = await Promise.allSettled(ids.map((deliveryId) => run({ deliveryId, trigger: 'scheduled' }, job)));
      expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
      const ep = (await db.pool.query('SELECT enabled, consecutive_failures FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0];
      expect(ep).toEqual({ enabled: false, consecutive_failures: 1 });
      const late = (await db.pool.query('SELECT status, attempts FROM webhook_deliveries WHERE id = $1', [ids[1]])).rows[0];
      expect(late).toEqual({ status: 'skipped', attempts: 1 }); // its 2xx is logged, but it stays skipped for redelivery
    }
  });
});

async function waitUntil(check: () => Promise<boolean>) {
  for (let i = 0; i < 200 && !(await check()); i++) await new Promise((r) => setTimeout(r, 25));
}
