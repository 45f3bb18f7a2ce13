// The webhook platform as its operators and customers use it: operational
// events, recover, the test event, the caps on endpoints and on redeliver and
// recover requests, and signing secrets (sealed at rest, never replayed, every
// secret younger than a day still signing).

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { emit, type EmitInput } from '../../src/outbox/outbox.js';
import type { Platform } from '../../src/platform.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { type Receiver, startReceiver } from '../support/receiver.js';

let db: TestDatabase;
let platform: Platform;
let acme: ApiClient;
const receivers: Receiver[] = [];

const CAP = 6;

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api', 'worker'],
    env: {
      HANDSET_DELIVERY_RETRY_SCHEDULE: '300ms,300ms',
      HANDSET_ENDPOINT_DISABLE_AFTER: '4',
      HANDSET_DELIVERY_TIMEOUT: '2s',
      HANDSET_ENDPOINTS_PER_ACCOUNT: String(CAP),
    },
  });
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
});
afterEach(async () => {
  await db.pool.query('UPDATE webhook_endpoints SET deleted_at = now(), enabled = false WHERE deleted_at IS NULL');
});
afterAll(async () => {
  await platform.stop();
  for (const r of receivers) await r.close();
  await db.drop();
});

async function subscribe(client: ApiClient, body: Record<string, unknown> = {}) {
  const receiver = await startReceiver();
  receivers.push(receiver);
  const res = await client.post('/v1/webhook_endpoints', { url: receiver.url, ...body });
  expect(res.status).toBe(201);
  receiver.secrets = [res.json.secret];
  return { receiver, id: res.json.id as string, secret: res.json.secret as string };
}

const event = (over: Partial<EmitInput> = {}): EmitInput => ({
  accountId: acme.accountId,
  tenantId: null,
  type: 'message.delivered',
  subjectId: `msg_${Math.random().toString(36).slice(2)}`,
  data: { status: 'delivered' },
  occurredAt: new Date(),
  ...over,
});
const emitted = (e: EmitInput) => withTx(db.pool, (tx) => emit(tx, e));
const types = (r: Receiver) => r.events().map((e) => e.type);
const about = (r: Receiver, type: string, id: string) =>
  r.events().filter((e) => e.type === type && e.data['id'] === id);

describe('operational events', () => {
  it('an endpoint disabled after its failures is announced once to another endpoint, never to itself; re-enabling announces it once', async () => {
    const watcher = await subscribe(acme);
    const failing = await subscribe(acme); // every type: operational ones too, but never about itself
    failing.receiver.answer = () => ({ status: 500, body: 'boom' });
    // Two events, each tried three times (the first try and two retries): the fourth failure in a row disables.
    await emitted(event());
    await emitted(event());
    await eventually(
      async () =>
        (await db.pool.query('SELECT enabled FROM webhook_endpoints WHERE id = $1', [failing.id])).rows[0].enabled ===
        false,
    );
    await eventually(async () => about(watcher.receiver, 'webhook_endpoint.disabled', failing.id).length === 1);
    const disabled = about(watcher.receiver, 'webhook_endpoint.disabled', failing.id)[0]!;
    expect(disabled.data).toMatchObject({
      id: failing.id,
      enabled: false,
      reason: 'consecutive_failures',
      last_failure: { status: 500, error: 'HTTP 500' },
    });
    expect(types(failing.receiver).filter((t) => t.startsWith('webhook_'))).toEqual([]);

    failing.receiver.answer = () => ({ status: 200 });
    expect((await acme.patch(`/v1/webhook_endpoints/${failing.id}`, { enabled: true })).status).toBe(200);
    expect((await acme.patch(`/v1/webhook_endpoints/${failing.id}`, { enabled: true })).status).toBe(200);
    await eventually(async () => about(watcher.receiver, 'webhook_endpoint.enabled', failing.id).length === 1);
    const enabled = about(watcher.receiver, 'webhook_endpoint.enabled', failing.id)[0]!;
    expect(enabled.data['sequence']).toBeGreaterThan(disabled.data['sequence'] as number);
    expect(
      await count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = $1 AND type LIKE 'webhook_endpoint.%'`, [
        failing.id,
      ]),
    ).toBe(2);
    // Neither was ever meant for the endpoint it is about: no delivery at all, not even a skipped one.
    expect(
      await count(
        db.pool,
        `SELECT * FROM webhook_deliveries d JOIN outbound_events ev ON ev.id = d.event_id
          WHERE d.endpoint_id = $1 AND ev.subject_id = $1`,
        [failing.id],
      ),
    ).toBe(0);
    expect(types(failing.receiver).filter((t) => t.startsWith('webhook_'))).toEqual([]);
  });

  it('a delivery failing its last retry is announced once, as webhook_delivery.exhausted, to the other endpoints', async () => {
    const watcher = await subscribe(acme, { event_types: ['webhook_delivery.exhausted'] });
    const flaky = await subscribe(acme, { event_types: ['message.failed'] });
    // Every try of one delivery fails: three in a row, one short of disabling the endpoint.
    flaky.receiver.answer = () => ({ status: 503 });
    const { eventId } = await emitted(event({ type: 'message.failed' }));
    await eventually(async () => about(watcher.receiver, 'webhook_delivery.exhausted', flaky.id).length === 1, 15_000);
    const exhausted = about(watcher.receiver, 'webhook_delivery.exhausted', flaky.id)[0]!;
    expect(exhausted.data).toMatchObject({ id: flaky.id, event_id: eventId, enabled: true });
    expect(flaky.receiver.received).toHaveLength(3);
    expect(await count(db.pool, `SELECT * FROM outbound_events WHERE type = 'webhook_delivery.exhausted'`)).toBe(1);
  });

  it('the test event goes to the endpoint asked for alone, whatever it subscribes to, and is logged like any delivery', async () => {
    const other = await subscribe(acme);
    const target = await subscribe(acme, { event_types: ['call.missed'] });
    const res = await acme.post(`/v1/webhook_endpoints/${target.id}/test`);
    expect(res.status).toBe(202);
    await eventually(async () => target.receiver.events().length === 1);
    expect(target.receiver.events()[0]).toMatchObject({ id: res.json.event_id, type: 'webhook_endpoint.test' });
    const log = await acme.get(`/v1/events/${res.json.event_id}/deliveries`);
    expect(log.json.data).toHaveLength(1);
    expect(log.json.data[0]).toMatchObject({ endpoint_id: target.id, status: 'succeeded' });
    await new Promise((r) => setTimeout(r, 300));
    expect(types(other.receiver)).not.toContain('webhook_endpoint.test');
  });
});

describe('recover', () => {
  it('re-sends the 5 events skipped while the endpoint was disabled, oldest first, with their ids; asked again, sends none twice', async () => {
    const ep = await subscribe(acme, { event_types: ['message.sent'] });
    expect((await acme.patch(`/v1/webhook_endpoints/${ep.id}`, { enabled: false })).status).toBe(200);
    const before = new Date(Date.now() - 1000).toISOString();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push((await emitted(event({ type: 'message.sent', occurredAt: new Date(Date.now() + i) }))).eventId);
    }
    expect(
      await count(db.pool, `SELECT * FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'skipped'`, [ep.id]),
    ).toBe(5);
    // Re-enabling re-sends nothing by itself.
    expect((await acme.patch(`/v1/webhook_endpoints/${ep.id}`, { enabled: true })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 300));
    expect(ep.receiver.received).toHaveLength(0);

    const first = await acme.post(`/v1/webhook_endpoints/${ep.id}/recover`, { since: before });
    expect(first.status).toBe(202);
    expect(first.json).toMatchObject({ status: 'running', endpoint_id: ep.id });
    await eventually(
      async () => (await acme.get(`/v1/webhook_endpoints/${ep.id}/recoveries`)).json.data[0].status === 'completed',
    );
    expect(ep.receiver.received.map((r) => r.headers['webhook-id'])).toEqual(ids);
    expect(ep.receiver.received.every((r) => r.verifiedWith[0])).toBe(true);
    expect((await acme.get(`/v1/webhook_endpoints/${ep.id}/recoveries`)).json.data[0]).toMatchObject({ resent: 5 });

    const again = await acme.post(`/v1/webhook_endpoints/${ep.id}/recover`, { since: before });
    expect(again.status).toBe(202);
    await eventually(
      async () => (await acme.get(`/v1/webhook_endpoints/${ep.id}/recoveries`)).json.data[0].status === 'completed',
    );
    expect(ep.receiver.received).toHaveLength(5);
    const log = await acme.get(`/v1/events/${ids[0]}/deliveries`);
    expect(log.json.data[0]).toMatchObject({ status: 'succeeded' });
    expect(log.json.data[0].attempts.map((a: { trigger: string }) => a.trigger)).toEqual(['recover']);
  });

  it('stops at the first delivery that fails, and a recovery already running is a 409', async () => {
    const ep = await subscribe(acme, { event_types: ['message.sent'] });
    expect((await acme.patch(`/v1/webhook_endpoints/${ep.id}`, { enabled: false })).status).toBe(200);
    const since = new Date(Date.now() - 1000).toISOString();
    for (let i = 0; i < 3; i++) await emitted(event({ type: 'message.sent', occurredAt: new Date(Date.now() + i) }));
    await acme.patch(`/v1/webhook_endpoints/${ep.id}`, { enabled: true });
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    ep.receiver.answer = async (n) => {
      if (n === 0) await held;
      return { status: n === 0 ? 200 : 500 };
    };
    expect((await acme.post(`/v1/webhook_endpoints/${ep.id}/recover`, { since })).status).toBe(202);
    await eventually(async () => ep.receiver.received.length === 1);
    const busy = await acme.post(`/v1/webhook_endpoints/${ep.id}/recover`, { since });
    expect(busy.status).toBe(409);
    expect(busy.json.code).toBe('recovery_in_progress');
    release();
    await eventually(
      async () => (await acme.get(`/v1/webhook_endpoints/${ep.id}/recoveries`)).json.data[0].status === 'stopped',
    );
    const r = (await acme.get(`/v1/webhook_endpoints/${ep.id}/recoveries`)).json.data[0];
    expect(r).toMatchObject({ resent: 1, status: 'stopped' });
    expect(r.stopped_reason).toContain('HTTP 500');
    expect(ep.receiver.received).toHaveLength(2);
  });
});

describe('caps', () => {
  it(`an account's ${CAP + 1}th endpoint is refused 422 too_many_endpoints and nothing is created`, async () => {
    const other = await createAccount(db.pool, platform.apiUrl!, 'Capped');
    const made = await Promise.all(
      Array.from({ length: CAP + 3 }, (_, i) =>
        other.post('/v1/webhook_endpoints', { url: `https://example.com/${i}` }),
      ),
    );
    expect(made.filter((r) => r.status === 201)).toHaveLength(CAP);
    const refused = made.filter((r) => r.status !== 201);
    expect(refused.map((r) => [r.status, r.json.code])).toEqual(Array(3).fill([422, 'too_many_endpoints']));
    expect(refused[0]!.headers.get('content-type')).toContain('application/problem+json');
    expect(
      await count(db.pool, 'SELECT * FROM webhook_endpoints WHERE account_id = $1 AND deleted_at IS NULL', [
        other.accountId,
      ]),
    ).toBe(CAP);
    // Deleting one makes room.
    await other.delete(`/v1/webhook_endpoints/${made.find((r) => r.status === 201)!.json.id}`);
    expect((await other.post('/v1/webhook_endpoints', { url: 'https://example.com/again' })).status).toBe(201);
  });

  it('recover asked for more than 10 times an hour is 429 problem+json, and starts nothing', async () => {
    const other = await createAccount(db.pool, platform.apiUrl!, 'Recovering');
    const ep = (await other.post('/v1/webhook_endpoints', { url: 'https://example.com/r' })).json.id as string;
    await db.pool.query(
      `INSERT INTO webhook_recoveries (account_id, endpoint_id, since, status)
       SELECT $1, $2, now(), 'completed' FROM generate_series(1, 10)`,
      [other.accountId, ep],
    );
    const res = await other.post(`/v1/webhook_endpoints/${ep}/recover`, { since: new Date().toISOString() });
    expect(res.status).toBe(429);
    expect(res.json.code).toBe('too_many_recoveries');
    expect(res.headers.get('retry-after')).toBeTruthy();
    expect(await count(db.pool, 'SELECT * FROM webhook_recoveries WHERE endpoint_id = $1', [ep])).toBe(10);
  });

  it('redeliver beyond 60 a minute is 429 problem+json, and schedules nothing more', async () => {
    const other = await createAccount(db.pool, platform.apiUrl!, 'Redelivering');
    const ep = await subscribe(other);
    const { eventId } = await emitted(event({ accountId: other.accountId }));
    await eventually(async () => ep.receiver.received.length === 1);
    const answers = [];
    for (let i = 0; i < 61; i++) answers.push((await other.post(`/v1/events/${eventId}/redeliver`)).status);
    expect(answers.slice(0, 60).every((s) => s === 202)).toBe(true);
    expect(answers[60]).toBe(429);
    await eventually(async () => ep.receiver.received.length >= 2);
    await new Promise((r) => setTimeout(r, 500));
    // A redelivery is one job per delivery: asked for 60 times while one was waiting, it ran at most that often.
    expect(ep.receiver.received.length).toBeLessThanOrEqual(61);
  });
});

describe('signing secrets', () => {
  it('are sealed at rest: the database holds no secret a create or rotation returned', async () => {
    const ep = await subscribe(acme);
    const rotated = (await acme.post(`/v1/webhook_endpoints/${ep.id}/rotate_secret`)).json.secret as string;
    const { rows } = await db.pool.query('SELECT sealed FROM webhook_endpoint_secrets WHERE endpoint_id = $1', [ep.id]);
    expect(rows).toHaveLength(2);
    for (const { sealed } of rows) {
      expect(sealed).toMatch(/^v1:[0-9a-f]{8}:/);
      for (const s of [ep.secret, rotated]) {
        expect(sealed).not.toContain(s);
        expect(sealed).not.toContain(s.slice('whsec_'.length));
      }
    }
    const dump = JSON.stringify((await db.pool.query('SELECT * FROM webhook_endpoints WHERE id = $1', [ep.id])).rows);
    expect(dump).not.toContain(ep.secret.slice('whsec_'.length));
  });

  it('a replayed create answers without the secret, saying so, and never the secret of before a rotation', async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    const key = { 'idempotency-key': `create-${Date.now()}` };
    const first = await acme.post('/v1/webhook_endpoints', { url: receiver.url }, key);
    expect(first.status).toBe(201);
    expect(first.json.secret).toMatch(/^whsec_/);
    expect(first.json.secret_omitted).toBeUndefined();
    await acme.post(`/v1/webhook_endpoints/${first.json.id}/rotate_secret`);
    const replay = await acme.post('/v1/webhook_endpoints', { url: receiver.url }, key);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.json.id).toBe(first.json.id);
    expect(replay.json.secret).toBeUndefined();
    expect(replay.json.secret_omitted).toMatch(/shown only/);
    const stored = await db.pool.query('SELECT response_body::text AS b FROM idempotency_keys WHERE key = $1', [
      key['idempotency-key'],
    ]);
    expect(stored.rows[0].b).not.toContain(first.json.secret);
  });

  it('two rotations within 24 h: all three secrets verify every delivery until each one’s 24 h end', async () => {
    const ep = await subscribe(acme);
    const second = (await acme.post(`/v1/webhook_endpoints/${ep.id}/rotate_secret`)).json.secret as string;
    const third = (await acme.post(`/v1/webhook_endpoints/${ep.id}/rotate_secret`)).json.secret as string;
    ep.receiver.secrets = [ep.secret, second, third];
    await emitted(event());
    await eventually(async () => ep.receiver.received.length === 1);
    expect(ep.receiver.received[0]!.verifiedWith).toEqual([true, true, true]);
    // A day later, the first secret's overlap has ended (moved in the database, not slept).
    await db.pool.query(
      `UPDATE webhook_endpoint_secrets SET expires_at = now() - interval '1 second'
        WHERE endpoint_id = $1 AND expires_at = (SELECT min(expires_at) FROM webhook_endpoint_secrets WHERE endpoint_id = $1)`,
      [ep.id],
    );
    await emitted(event());
    await eventually(async () => ep.receiver.received.length === 2);
    expect(ep.receiver.received[1]!.verifiedWith).toEqual([false, true, true]);
  });

  it('a deleted endpoint keeps no secret', async () => {
    const ep = await subscribe(acme);
    expect((await acme.delete(`/v1/webhook_endpoints/${ep.id}`)).status).toBe(200);
    expect(await count(db.pool, 'SELECT * FROM webhook_endpoint_secrets WHERE endpoint_id = $1', [ep.id])).toBe(0);
  });
});
