// The delivery window: every attempt of a customer webhook has the whole
// HANDSET_DELIVERY_TIMEOUT to be answered, whatever the endpoint's recent health.
// An endpoint that timed out once (its breaker open: one attempt at a time, in
// its lane) is still given the whole window, so a slow success is a success. The
// rule is the production one at a smaller scale: a 4 s window and answers after
// 3 s (15 s and 10 s in production). Counted: requests received and the
// endpoint's state, never how long anything took.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { emit } from '../../src/outbox/outbox.js';
import type { Platform } from '../../src/platform.js';
import { createAccount } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

const WINDOW_MS = 4_000;
const SLOW_MS = 3_000;
const DISABLE_AFTER = 3;

let db: TestDatabase;
let platform: Platform;
const receivers: Receiver[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api', 'worker'],
    env: {
      HANDSET_DELIVERY_TIMEOUT: `${WINDOW_MS}ms`,
      HANDSET_DELIVERY_RETRY_SCHEDULE: '200ms,200ms,200ms,200ms',
      HANDSET_ENDPOINT_DISABLE_AFTER: String(DISABLE_AFTER),
    },
  });
});
afterAll(async () => {
  await platform.stop();
  for (const r of receivers) await r.close();
  await db.drop();
});

/** An account with one endpoint whose first request hangs and every later one is answered 200 after SLOW_MS. */
async function slowAfterAHang(name: string) {
  const account = await createAccount(db.pool, platform.apiUrl!, name);
  const receiver = await startReceiver();
  receivers.push(receiver);
  receiver.answer = async (n) => {
    if (n === 0) return { status: 200, hang: true };
    await new Promise((resolve) => setTimeout(resolve, SLOW_MS));
    return { status: 200 };
  };
  const res = await account.post('/v1/webhook_endpoints', { url: receiver.url });
  expect(res.status).toBe(201);
  receiver.secrets = [res.json.secret];
  const emitOne = (i: number) =>
    withTx(db.pool, (tx) =>
      emit(tx, {
        accountId: account.accountId,
        tenantId: null,
        type: 'message.delivered',
        subjectId: `msg_${name}_${i}`,
        data: { id: `msg_${name}_${i}`, status: 'delivered' },
        occurredAt: new Date(),
      }),
    );
  const endpoint = async () =>
    (
      await db.pool.query(
        'SELECT enabled, consecutive_failures, timing_out, disabled_reason FROM webhook_endpoints WHERE id = $1',
        [res.json.id],
      )
    ).rows[0];
  const deliveries = async () =>
    (
      await db.pool.query<{ status: string; attempts: number }>(
        'SELECT status, attempts FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id',
        [res.json.id],
      )
    ).rows;
  const settled = () => eventually(async () => (await deliveries()).every((d) => d.status !== 'pending'), 60_000, 50);
  return { receiver, emitOne, endpoint, deliveries, settled };
}

describe('the delivery window under the breaker', () => {
  it.concurrent('an endpoint whose first attempt hangs and whose retry is answered 200 within the window gets the event twice, and is healthy again', async () => {
    const ep = await slowAfterAHang('twice');
    await ep.emitOne(0);
    await ep.settled();
    expect(await ep.deliveries()).toEqual([{ status: 'succeeded', attempts: 2 }]);
    expect(ep.receiver.received).toHaveLength(2);
    expect(await ep.endpoint()).toMatchObject({ enabled: true, consecutive_failures: 0, timing_out: false });
  });

  it.concurrent('an endpoint that times out once and then always answers within the window is never disabled: each later event is received once', async () => {
    const ep = await slowAfterAHang('slow');
    await ep.emitOne(0);
    // Its breaker is open (the first attempt timed out) before the next events are emitted.
    await eventually(async () => (await ep.endpoint()).timing_out === true, 30_000, 50);
    for (let i = 1; i < DISABLE_AFTER; i++) await ep.emitOne(i);
    await ep.settled();
    expect(await ep.deliveries()).toEqual([
      { status: 'succeeded', attempts: 2 },
      ...Array.from({ length: DISABLE_AFTER - 1 }, () => ({ status: 'succeeded', attempts: 1 })),
    ]);
    expect(ep.receiver.received).toHaveLength(DISABLE_AFTER + 1);
    expect(await ep.endpoint()).toMatchObject({ enabled: true, consecutive_failures: 0, timing_out: false });
  });
});
