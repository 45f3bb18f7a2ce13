// The customer API surface: authentication, isolation between accounts,
// Idempotency-Key, problem+json errors, pagination, SSRF refusals and the docs.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKeyRevoke } from '../../src/accounts/accounts.sql.js';
import { withTx } from '../../src/db/tx.js';
import { sendWebhook } from '../../src/delivery/http.js';
import { isBlockedAddress } from '../../src/delivery/ssrf.js';
import { emit } from '../../src/outbox/outbox.js';
import type { Platform } from '../../src/platform.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver } from '../support/receiver.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';

let db: TestDatabase;
let sim: Simulator; // the carrier a number's claim is checked with
let platform: Platform; // private webhook URLs refused, like production
let base: string;
let acme: ApiClient;
let globex: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, seed: 'api' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api'],
    env: { ...sim.carrierEnv(), HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'false' },
  });
  base = platform.apiUrl!;
  acme = await createAccount(db.pool, base, 'Acme');
  globex = await createAccount(db.pool, base, 'Globex');
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const endpointRow = (url: string) =>
  withTx(db.pool, async (tx) => {
    const { rows } = await tx.query(`INSERT INTO webhook_endpoints (account_id, url) VALUES ($1, $2) RETURNING id`, [
      acme.accountId,
      url,
    ]);
    return rows[0].id as string;
  });

describe('authentication', () => {
  it('no key, a malformed key, an unknown key and a revoked key are all 401 problem+json', async () => {
    const revoked = await createAccount(db.pool, base, 'Revoked');
    const { rows } = await db.pool.query('SELECT id FROM api_keys WHERE account_id = $1', [revoked.accountId]);
    await withTx(db.pool, (tx) => apiKeyRevoke(tx, revoked.accountId, rows[0].id));
    for (const key of [
      null,
      'nope',
      'hsk_' + 'A'.repeat(32),
      acme.key.slice(0, -1) + (acme.key.endsWith('A') ? 'B' : 'A'),
      revoked.key,
    ]) {
      const res = await request(base, 'GET', '/v1/phone_numbers', key);
      expect(res.status).toBe(401);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.json).toMatchObject({ status: 401, code: 'unauthorized', title: 'Unauthorized' });
    }
  });

  it('API keys are stored hashed, with only a prefix in clear', async () => {
    const { rows } = await db.pool.query('SELECT prefix, secret_hash FROM api_keys WHERE account_id = $1', [
      acme.accountId,
    ]);
    expect(acme.key.startsWith(rows[0].prefix)).toBe(true);
    expect(rows[0].prefix.length).toBeLessThan(acme.key.length / 2);
    expect(JSON.stringify(rows)).not.toContain(acme.key.slice(rows[0].prefix.length));
  });
});

describe('isolation', () => {
  it("another account's endpoints and events are 404 to read, change, rotate, delete or redeliver, and absent from lists", async () => {
    const receiver = await startReceiver();
    try {
      const epId = await endpointRow(receiver.url);
      const { eventId } = await withTx(db.pool, (tx) =>
        emit(tx, {
          accountId: acme.accountId,
          tenantId: null,
          type: 'message.sent',
          subjectId: 'msg_x',
          data: {},
          occurredAt: new Date(),
        }),
      );
      expect((await acme.get(`/v1/webhook_endpoints/${epId}`)).status).toBe(200);
      expect((await acme.get(`/v1/events/${eventId}`)).status).toBe(200);

      const attempts = [
        await globex.get(`/v1/webhook_endpoints/${epId}`),
        await globex.patch(`/v1/webhook_endpoints/${epId}`, { enabled: false }),
        await globex.post(`/v1/webhook_endpoints/${epId}/rotate_secret`),
        await globex.delete(`/v1/webhook_endpoints/${epId}`),
        await globex.get(`/v1/events/${eventId}`),
        await globex.get(`/v1/events/${eventId}/deliveries`),
        await globex.post(`/v1/events/${eventId}/redeliver`),
      ];
      expect(attempts.map((r) => [r.status, r.json.code])).toEqual(Array(7).fill([404, 'resource_not_found']));
      expect((await globex.get('/v1/webhook_endpoints')).json).toEqual({ data: [], has_more: false });
      expect((await globex.get('/v1/events')).json).toEqual({ data: [], has_more: false });
      // nothing changed
      expect((await acme.get(`/v1/webhook_endpoints/${epId}`)).json).toMatchObject({ enabled: true });
    } finally {
      await receiver.close();
    }
  });
});

describe('Idempotency-Key', () => {
  it('the same key and body replays the stored response; a different body is 422; nothing is created twice', async () => {
    const body = { number: '+14155550001', ring_timeout_secs: 30 };
    const first = await acme.post('/v1/phone_numbers', body, { 'idempotency-key': 'k-1' });
    expect(first.status).toBe(201);
    const again = await acme.post(
      '/v1/phone_numbers',
      { ring_timeout_secs: 30, number: '+14155550001' },
      { 'idempotency-key': 'k-1' },
    );
    expect(again.status).toBe(201);
    expect(again.json).toEqual(first.json);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const other = await acme.post('/v1/phone_numbers', { number: '+14155550002' }, { 'idempotency-key': 'k-1' });
    expect(other.status).toBe(422);
    expect(other.json.code).toBe('idempotency_key_reused');
    expect(await count(db.pool, `SELECT * FROM phone_numbers WHERE account_id = $1`, [acme.accountId])).toBe(1);
    // keys are per account: Globex may use the same key for its own request
    expect(
      (await globex.post('/v1/phone_numbers', { number: '+14155550003' }, { 'idempotency-key': 'k-1' })).status,
    ).toBe(201);
  });

  it('a request while the same key is still in flight is 409 and creates nothing', async () => {
    const holder = await db.pool.connect();
    try {
      // what the first request holds while it runs
      await holder.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [`idem:${acme.accountId}:k-busy`]);
      const res = await acme.post('/v1/phone_numbers', { number: '+14155550009' }, { 'idempotency-key': 'k-busy' });
      expect(res.status).toBe(409);
      expect(res.json.code).toBe('idempotency_key_in_use');
    } finally {
      await holder.query('SELECT pg_advisory_unlock_all()');
      holder.release();
    }
    expect(await count(db.pool, `SELECT * FROM phone_numbers WHERE number = '+14155550009'`)).toBe(0);
    expect(
      (await acme.post('/v1/phone_numbers', { number: '+14155550009' }, { 'idempotency-key': 'k-busy' })).status,
    ).toBe(201);
  });

  it('a failed request does not burn its key', async () => {
    const taken = await acme.post('/v1/phone_numbers', { number: '+14155550003' }, { 'idempotency-key': 'k-2' });
    expect(taken.status).toBe(422); // Globex holds it
    expect(taken.json.code).toBe('number_unavailable');
    expect(
      (await acme.post('/v1/phone_numbers', { number: '+14155550004' }, { 'idempotency-key': 'k-2' })).status,
    ).toBe(201);
  });
});

describe('phone numbers', () => {
  it('are E.164, unique across accounts, and validated with clear codes', async () => {
    const bad = await acme.post('/v1/phone_numbers', { number: '4155550100' });
    expect(bad.status).toBe(422);
    expect(bad.json).toMatchObject({ code: 'invalid_phone_number', param: 'number' });
    const ring = await acme.post('/v1/phone_numbers', {
      number: '+14155550110',
      inbound_ring: ['+14155550111', '555'],
    });
    expect(ring.json).toMatchObject({ status: 422, code: 'invalid_phone_number', param: 'inbound_ring.1' });
    const unknown = await acme.post('/v1/phone_numbers', { number: '+14155550110', colour: 'blue' });
    expect(unknown.json).toMatchObject({ status: 422, code: 'unknown_field', param: 'colour' });
    const taken = await globex.post('/v1/phone_numbers', { number: '+14155550001' });
    expect(taken.json).toMatchObject({ status: 422, code: 'number_unavailable', param: 'number' });
  });

  it('list with cursor pagination, newest first', async () => {
    const team = await createAccount(db.pool, base, 'Paged');
    const made: string[] = [];
    for (let i = 0; i < 5; i++)
      made.push((await team.post('/v1/phone_numbers', { number: `+1212555010${i}` })).json.id);
    const p1 = await team.get('/v1/phone_numbers?limit=2');
    expect(p1.json.data.map((n: { id: string }) => n.id)).toEqual([made[4], made[3]]);
    expect(p1.json.has_more).toBe(true);
    const p2 = await team.get(`/v1/phone_numbers?limit=2&starting_after=${made[3]}`);
    expect(p2.json.data.map((n: { id: string }) => n.id)).toEqual([made[2], made[1]]);
    const p3 = await team.get(`/v1/phone_numbers?limit=2&starting_after=${made[1]}`);
    expect(p3.json).toMatchObject({ has_more: false });
    expect(p3.json.data).toHaveLength(1);
    expect((await team.get('/v1/phone_numbers?limit=0')).json).toMatchObject({ status: 422, param: 'limit' });
    expect((await team.get('/v1/phone_numbers?limit=101')).status).toBe(422);
  });
});

describe('webhook endpoint URLs (SSRF)', () => {
  it.each([
    ['http://example.com/hooks', 'invalid_url'],
    ['https://127.0.0.1/hooks', 'url_not_allowed'],
    ['https://169.254.169.254/latest/meta-data', 'url_not_allowed'],
    ['https://10.0.0.1/hooks', 'url_not_allowed'],
    ['https://[::1]/hooks', 'url_not_allowed'],
    ['https://[::ffff:127.0.0.1]/hooks', 'url_not_allowed'],
    ['https://localhost/hooks', 'url_not_allowed'],
    ['https://user:pw@example.com/hooks', 'invalid_url'],
    ['not a url', 'invalid_url'],
  ])('%s is refused (%s) and nothing is created', async (url, code) => {
    const res = await acme.post('/v1/webhook_endpoints', { url });
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ code, param: 'url' });
    expect(await count(db.pool, 'SELECT * FROM webhook_endpoints WHERE url = $1', [url])).toBe(0);
  });

  it('classifies addresses, including IPv4 hidden in IPv6', () => {
    const blocked = [
      '127.0.0.1',
      '10.1.2.3',
      '172.16.0.1',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '::1',
      '::',
      'fe80::1',
      'fd00:ec2::254',
      '::ffff:10.0.0.1',
      '64:ff9b::7f00:1',
      '2002:7f00:1::',
      '224.0.0.1',
    ];
    const allowed = ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '::ffff:8.8.8.8', '203.0.114.1'];
    expect(blocked.filter((a) => !isBlockedAddress(a))).toEqual([]);
    expect(allowed.filter(isBlockedAddress)).toEqual([]);
  });

  it('refuses at connect time too: a URL whose host now resolves to loopback is never contacted (DNS rebinding)', async () => {
    const receiver = await startReceiver();
    try {
      const viaName = receiver.url.replace('127.0.0.1', 'localhost');
      const result = await sendWebhook(viaName, {}, '{}', { timeoutMs: 2000, allowPrivate: false });
      expect(result).toMatchObject({ status: null, error: 'blocked address' });
      const literal = await sendWebhook(receiver.url, {}, '{}', { timeoutMs: 2000, allowPrivate: false });
      expect(literal).toMatchObject({ status: null, error: 'blocked address' });
      expect(receiver.received).toHaveLength(0);
      // with private URLs allowed (dev), the same request goes through
      expect((await sendWebhook(viaName, {}, '{}', { timeoutMs: 2000, allowPrivate: true })).status).toBe(200);
    } finally {
      await receiver.close();
    }
  });
});

describe('errors and docs', () => {
  it('unknown routes and ids are 404 problem+json without internals', async () => {
    const res = await acme.get('/v1/nothing-here');
    expect(res.status).toBe(404);
    expect(res.json).toMatchObject({
      status: 404,
      code: 'route_not_found',
      type: expect.stringContaining('route_not_found'),
    });
    const missing = await acme.get('/v1/webhook_endpoints/ep_doesnotexist');
    expect(missing.json).toMatchObject({ status: 404, code: 'resource_not_found' });
  });

  it('malformed JSON is a 400 problem, not a 500', async () => {
    const res = await request(base, 'POST', '/v1/phone_numbers', acme.key, '{"number":', {});
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({ status: 400, code: 'invalid_request' });
  });

  it('serves an OpenAPI document generated from the route schemas, and browsable docs', async () => {
    const doc = await request(base, 'GET', '/openapi.json', null);
    expect(doc.status).toBe(200);
    expect(doc.json.openapi).toBe('3.1.0');
    expect(Object.keys(doc.json.paths)).toEqual(
      expect.arrayContaining([
        '/v1/phone_numbers',
        '/v1/webhook_endpoints',
        '/v1/webhook_endpoints/{id}/rotate_secret',
        '/v1/events/{id}/redeliver',
      ]),
    );
    expect(
      doc.json.paths['/v1/phone_numbers'].post.requestBody.content['application/json'].schema.properties.number.pattern,
    ).toBe('^\\+[1-9][0-9]{1,14}$');
    const html = await fetch(`${base}/docs/`);
    expect(html.status).toBe(200);
    expect(await html.text()).toContain('swagger');
    expect((await request(base, 'GET', '/healthz', null)).json).toEqual({ status: 'ok' });
    expect((await request(base, 'GET', '/readyz', null)).json).toEqual({ status: 'ready' });
  });
});
