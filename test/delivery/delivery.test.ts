// The outbox and Standard Webhooks delivery, seen from a customer's receiver that
// verifies every request with the `standardwebhooks` package.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { emit, type EmitInput } from '../../src/outbox/outbox.js';
import type { Platform } from '../../src/platform.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

let db: TestDatabase;
let platform: Platform;
let acme: ApiClient;
const receivers: Receiver[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api', 'worker'],
    env: {
      HANDSET_DELIVERY_RETRY_SCHEDULE: '1s,1s,1s',
      HANDSET_ENDPOINT_DISABLE_AFTER: '5',
      HANDSET_DELIVERY_TIMEOUT: '3s',
      HANDSET_WORKER_CONCURRENCY: '4',
      // Shares of 5 per account and 2 per endpoint (the hanging-endpoint test counts on them).
      HANDSET_DELIVERY_CONCURRENCY: '10',
    },
  });
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
});
afterEach(async () => {
  // each test owns its endpoints; stop earlier ones from receiving later events
  await db.pool.query(`UPDATE webhook_endpoints SET deleted_at = now() WHERE deleted_at IS NULL`);
});
afterAll(async () => {
  await platform.stop();
  for (const r of receivers) await r.close();
  await db.drop();
});

async function subscribe(eventTypes?: string[]): Promise<{ receiver: Receiver; endpointId: string }> {
  const receiver = await startReceiver();
  receivers.push(receiver);
  const res = await acme.post('/v1/webhook_endpoints', {
    url: receiver.url,
    ...(eventTypes ? { event_types: eventTypes } : {}),
  });
  expect(res.status).toBe(201);
  expect(res.json.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
  receiver.secrets = [res.json.secret];
  return { receiver, endpointId: res.json.id };
}

const event = (over: Partial<EmitInput> = {}): EmitInput => ({
  accountId: acme.accountId,
  tenantId: null,
  type: 'message.delivered',
  subjectId: 'msg_test',
  data: { id: 'msg_test', status: 'delivered' },
  occurredAt: new Date('2026-11-29T12:00:00.000Z'),
  ...over,
});

const deliveryOf = async (eventId: string, endpointId: string) =>
  (
    await db.pool.query('SELECT status, attempts FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2', [
      eventId,
      endpointId,
    ])
  ).rows[0];

describe('outbox', () => {
  it('an event emitted in a transaction that rolls back leaves no event, no delivery and sends nothing', async () => {
    const { receiver } = await subscribe();
    await expect(
      withTx(db.pool, async (tx) => {
        await emit(tx, event({ subjectId: 'msg_rolled_back' }));
        throw new Error('the transition failed after emitting');
      }),
    ).rejects.toThrow('the transition failed');
    expect(await count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = 'msg_rolled_back'`)).toBe(0);
    expect(await count(db.pool, `SELECT * FROM graphile_worker.jobs WHERE task_identifier = 'delivery.attempt'`)).toBe(
      0,
    );
    // a committed event afterwards is the only thing the receiver ever sees
    const { eventId } = await withTx(db.pool, (tx) => emit(tx, event({ subjectId: 'msg_committed' })));
    await eventually(async () => receiver.received.length === 1);
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.received.map((r) => r.headers['webhook-id'])).toEqual([eventId]);
  });

  it('a committed event reaches each subscribed endpoint exactly once and no endpoint of another type', async () => {
    const all = await subscribe();
    const delivered = await subscribe(['message.delivered', 'message.failed']);
    const calls = await subscribe(['call.completed']);
    const { eventId, deliveries } = await withTx(db.pool, (tx) => emit(tx, event()));
    expect(deliveries).toBe(2);
    await eventually(async () => all.receiver.received.length === 1 && delivered.receiver.received.length === 1);
    await eventually(async () => (await deliveryOf(eventId, all.endpointId)).status === 'succeeded');
    await new Promise((r) => setTimeout(r, 300));
    expect(calls.receiver.received).toHaveLength(0);
    for (const r of [all.receiver, delivered.receiver]) {
      expect(r.received).toHaveLength(1);
      expect(r.received[0]!.verifiedWith).toEqual([true]);
      expect(JSON.parse(r.received[0]!.body)).toEqual({
        id: eventId,
        type: 'message.delivered',
        timestamp: '2026-11-29T12:00:00.000Z',
        account_id: acme.accountId,
        data: { id: 'msg_test', status: 'delivered' },
      });
      expect(r.received[0]!.headers['content-type']).toBe('application/json');
    }
  });
});

describe('delivery', () => {
  it('a receiver that fails three times then succeeds gets four attempts with the same id, fresh timestamps and valid signatures', async () => {
    const { receiver, endpointId } = await subscribe();
    receiver.answer = (n) => ({ status: n < 3 ? 500 : 200 });
    const { eventId } = await withTx(db.pool, (tx) => emit(tx, event()));
    await eventually(async () => (await deliveryOf(eventId, endpointId))?.status === 'succeeded', 20_000);
    expect(receiver.received).toHaveLength(4);
    expect(new Set(receiver.received.map((r) => r.headers['webhook-id']))).toEqual(new Set([eventId]));
    expect(receiver.received.every((r) => r.verifiedWith[0] === true)).toBe(true);
    const stamps = receiver.received.map((r) => Number(r.headers['webhook-timestamp']));
    for (let i = 1; i < stamps.length; i++) expect(stamps[i]).toBeGreaterThan(stamps[i - 1]!);
    expect(new Set(receiver.received.map((r) => r.headers['webhook-signature'])).size).toBe(4);

    const log = await acme.get(`/v1/events/${eventId}/deliveries`);
    expect(log.status).toBe(200);
    const d = log.json.data.find((x: { endpoint_id: string }) => x.endpoint_id === endpointId);
    expect(d.status).toBe('succeeded');
    expect(d.attempts.map((a: { attempt: number; response_status: number }) => [a.attempt, a.response_status])).toEqual(
      [
        [1, 500],
        [2, 500],
        [3, 500],
        [4, 200],
      ],
    );
    expect(d.attempts[0]).toMatchObject({ trigger: 'scheduled', error: 'HTTP 500', response_excerpt: 'answer 500' });
    expect(d.attempts[0].duration_ms).toBeGreaterThanOrEqual(0);
    expect(
      (await db.pool.query('SELECT consecutive_failures FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0]
        .consecutive_failures,
    ).toBe(0);
  });

  it('a success at a healthy endpoint is recorded while its endpoint row is locked elsewhere: successes do not queue on that row', async () => {
    const { receiver, endpointId } = await subscribe();
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE', [endpointId]);
      const { eventId } = await withTx(db.pool, (tx) => emit(tx, event({ subjectId: 'msg_row_locked' })));
      await eventually(async () => (await deliveryOf(eventId, endpointId))?.status === 'succeeded', 10_000);
      expect(receiver.received).toHaveLength(1);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
  });

  it('an endpoint that answers fast earns more attempts in flight than half its account’s share', async () => {
    const { receiver, endpointId } = await subscribe();
    let inFlight = 0;
    let most = 0;
    receiver.answer = async (n) => {
      if (n === 0) return { status: 200 }; // a fast first answer: the endpoint earns the larger share
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((r) => setTimeout(r, 100)); // still fast, long enough for attempts to overlap
      inFlight--;
      return { status: 200 };
    };
    const first = await withTx(db.pool, (tx) => emit(tx, event({ subjectId: 'msg_fast_0' })));
    await eventually(async () => (await deliveryOf(first.eventId, endpointId))?.status === 'succeeded');
    await withTx(db.pool, async (tx) => {
      for (let i = 1; i <= 24; i++) await emit(tx, event({ subjectId: `msg_fast_${i}` }));
    });
    await eventually(async () => receiver.received.length === 25, 30_000);
    // The worker's account share is 5 (half its delivery concurrency of 10): half of it is 2, a fast endpoint's 4.
    expect(most).toBeGreaterThan(2);
  });

  it('a delivery that runs out of retries ends failed, and a redirect is a failure, not followed', async () => {
    const { receiver, endpointId } = await subscribe();
    receiver.answer = () => ({ status: 302, headers: { location: 'http://127.0.0.1:1/elsewhere' } });
    const { eventId } = await withTx(db.pool, (tx) => emit(tx, event()));
    await eventually(async () => (await deliveryOf(eventId, endpointId))?.status === 'failed', 20_000);
    expect(await deliveryOf(eventId, endpointId)).toEqual({ status: 'failed', attempts: 4 }); // 1 + 3 retries
    expect(receiver.received).toHaveLength(4);
  });

  it('an always-failing endpoint is disabled after N consecutive failures, then skipped, and redelivery reaches it after re-enabling', async () => {
    const { receiver, endpointId } = await subscribe();
    receiver.answer = () => ({ status: 503 });
    // Two events: four attempts each at most, so failures add up across deliveries to the threshold of five.
    const first = await withTx(db.pool, (tx) => emit(tx, event({ subjectId: 'msg_1' })));
    const second = await withTx(db.pool, (tx) => emit(tx, event({ subjectId: 'msg_1b' })));
    await eventually(
      async () =>
        (await db.pool.query('SELECT enabled FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0].enabled ===
        false,
      20_000,
    );
    const ep = await acme.get(`/v1/webhook_endpoints/${endpointId}`);
    expect(ep.json).toMatchObject({ enabled: false, disabled_reason: 'consecutive_failures', consecutive_failures: 5 });
    await new Promise((r) => setTimeout(r, 1500)); // any attempt in flight at the disable lands now
    expect(receiver.received).toHaveLength(5);
    const ended = [
      (await deliveryOf(first.eventId, endpointId)).status,
      (await deliveryOf(second.eventId, endpointId)).status,
    ];
    expect(ended).toContain('skipped');
    expect(ended.every((s) => s === 'skipped' || s === 'failed')).toBe(true);

    // while disabled: recorded as skipped, nothing sent
    const during = await withTx(db.pool, (tx) => emit(tx, event({ subjectId: 'msg_2' })));
    expect((await deliveryOf(during.eventId, endpointId)).status).toBe('skipped');
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.received).toHaveLength(5);

    // re-enable (resets the count) and redeliver: same event id, fresh signature
    receiver.answer = () => ({ status: 200 });
    const patched = await acme.patch(`/v1/webhook_endpoints/${endpointId}`, { enabled: true });
    expect(patched.json).toMatchObject({ enabled: true, disabled_reason: null, consecutive_failures: 0 });
    const redelivered = await acme.post(`/v1/events/${during.eventId}/redeliver`);
    expect(redelivered.status).toBe(202);
    await eventually(async () => (await deliveryOf(during.eventId, endpointId)).status === 'succeeded');
    const last = receiver.received.at(-1)!;
    expect(last.headers['webhook-id']).toBe(during.eventId);
    expect(last.verifiedWith).toEqual([true]);
    const log = await acme.get(`/v1/events/${during.eventId}/deliveries`);
    expect(log.json.data[0].attempts.map((a: { trigger: string }) => a.trigger)).toEqual(['redeliver']);
  });

  it('a redelivery is an attempt of its own: a succeeded delivery stays succeeded, and a failed redelivery moves neither the delivery nor the endpoint’s failure count', async () => {
    const { receiver, endpointId } = await subscribe(['message.canceled']);
    const { eventId } = await withTx(db.pool, (tx) =>
      emit(tx, event({ type: 'message.canceled', subjectId: 'msg_redo' })),
    );
    await eventually(async () => (await deliveryOf(eventId, endpointId)).status === 'succeeded');
    receiver.answer = () => ({ status: 500 });
    expect((await acme.post(`/v1/events/${eventId}/redeliver`)).status).toBe(202);
    await eventually(async () => receiver.received.length === 2);
    await eventually(async () => (await deliveryOf(eventId, endpointId)).attempts === 2);
    expect(await deliveryOf(eventId, endpointId)).toEqual({ status: 'succeeded', attempts: 2 });
    const ep = (await acme.get(`/v1/webhook_endpoints/${endpointId}`)).json;
    expect(ep).toMatchObject({ enabled: true, consecutive_failures: 0 });
    const log = (await acme.get(`/v1/events/${eventId}/deliveries`)).json.data[0];
    expect(
      log.attempts.map((a: { trigger: string; response_status: number }) => [a.trigger, a.response_status]),
    ).toEqual([
      ['scheduled', 200],
      ['redeliver', 500],
    ]);
  });

  it('410 Gone disables the endpoint at once', async () => {
    const { receiver, endpointId } = await subscribe();
    receiver.answer = () => ({ status: 410 });
    const { eventId } = await withTx(db.pool, (tx) => emit(tx, event()));
    await eventually(
      async () =>
        (await db.pool.query('SELECT disabled_reason FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0]
          .disabled_reason === 'gone',
    );
    expect(receiver.received).toHaveLength(1);
    expect((await deliveryOf(eventId, endpointId)).status).toBe('skipped');
  });

  it('during a secret rotation a receiver holding either secret verifies every request', async () => {
    const { receiver, endpointId } = await subscribe();
    const oldSecret = receiver.secrets[0]!;
    const rotated = await acme.post(`/v1/webhook_endpoints/${endpointId}/rotate_secret`);
    expect(rotated.status).toBe(200);
    expect(rotated.json.secret).not.toBe(oldSecret);
    receiver.secrets = [oldSecret, rotated.json.secret];
    await withTx(db.pool, (tx) => emit(tx, event()));
    await eventually(async () => receiver.received.length === 1);
    expect(receiver.received[0]!.verifiedWith).toEqual([true, true]);
    expect(String(receiver.received[0]!.headers['webhook-signature']).split(' ')).toHaveLength(2);
    // the secret is shown only on create and rotate
    expect((await acme.get(`/v1/webhook_endpoints/${endpointId}`)).json.secret).toBeUndefined();
  });

  it('a hanging endpoint does not hold up deliveries to other endpoints', async () => {
    const hanging = await subscribe(['call.missed']);
    hanging.receiver.answer = () => ({ status: 200, hang: true });
    const healthy = await subscribe(['call.completed']);
    const hung = [];
    for (let i = 0; i < 6; i++)
      hung.push(await withTx(db.pool, (tx) => emit(tx, event({ type: 'call.missed', subjectId: `call_h${i}` }))));
    const fine = [];
    for (let i = 0; i < 6; i++)
      fine.push(await withTx(db.pool, (tx) => emit(tx, event({ type: 'call.completed', subjectId: `call_f${i}` }))));
    await eventually(async () => healthy.receiver.received.length === 6);
    // every healthy delivery got through while the hanging endpoint's first attempts were still unanswered
    expect(
      await count(
        db.pool,
        `SELECT * FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = $1`,
        [hanging.endpointId],
      ),
    ).toBe(0);
    // and the hanging endpoint never held more than its share (2 of its account's 5) + its serial lane at once
    expect(hanging.receiver.received.length).toBeLessThanOrEqual(3);
  });
});

describe('crash between the receiver answering and the record', () => {
  it('the delivery is sent again with the same webhook-id and nothing is lost', async () => {
    const { spawnHandset } = await import('../support/process.js');
    const { receiver, endpointId } = await subscribe(['message.canceled']);
    // Stop the in-process worker from taking this delivery: only the child worker may.
    await Promise.all([...platform.relays, ...platform.runners].map((r) => r.stop()));
    const { eventId } = await withTx(db.pool, (tx) => emit(tx, event({ type: 'message.canceled' })));
    // The relay's, not a job's: the row is the work.
    expect(
      await count(db.pool, `SELECT * FROM webhook_deliveries WHERE event_id = $1 AND relay_after IS NOT NULL`, [
        eventId,
      ]),
    ).toBe(1);

    // Hold the attempts' table so the child blocks recording its attempt, after the receiver has answered
    // (the claim of the row, before the attempt, does not touch it).
    const locker = await db.pool.connect();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE webhook_attempts IN SHARE MODE');
    const env = {
      DATABASE_URL: db.url,
      HANDSET_WORKER_STALE_AFTER: '2s',
      HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'true',
      TELNYX_API_KEY: 'KEY_test',
    };
    const child = spawnHandset(['serve', '--roles', 'worker'], env);
    try {
      await eventually(async () => receiver.received.length === 1, 20_000).catch((e) => {
        throw new Error(String(e) + child.output());
      });
      // The child's record now waits on the table lock. It is one statement, which
      // would commit on its own once the lock goes, dead client or not; a crash
      // that loses the record is one whose connection dies with it.
      const waiting = `SELECT pid FROM pg_stat_activity WHERE application_name = 'handset-delivery' AND wait_event_type = 'Lock'`;
      await eventually(async () => (await count(db.pool, waiting)) === 1);
      child.child.kill('SIGKILL');
      await child.exited;
      await db.pool.query(`SELECT pg_terminate_backend(pid) FROM (${waiting}) AS w`);
      await locker.query('COMMIT');
      locker.release();
      expect((await deliveryOf(eventId, endpointId)).attempts).toBe(0); // the answered attempt was never recorded

      const second = spawnHandset(['serve', '--roles', 'worker'], env);
      try {
        await eventually(async () => (await deliveryOf(eventId, endpointId)).status === 'succeeded', 30_000);
      } finally {
        second.child.kill('SIGTERM');
        await second.exited;
      }
      expect(receiver.received.map((r) => r.headers['webhook-id'])).toEqual([eventId, eventId]);
      expect(receiver.received.every((r) => r.verifiedWith[0])).toBe(true);
      expect(await deliveryOf(eventId, endpointId)).toEqual({ status: 'succeeded', attempts: 1 });
    } finally {
      child.child.kill('SIGKILL');
    }
  });
});
