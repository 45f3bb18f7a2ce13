// Requests that HTTP clients commonly send and the API accepts: a body-less POST
// that still says Content-Type: application/json, and the Bearer scheme in any case.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

let db: TestDatabase;
let platform: Platform;
let base: string;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'] });
  base = platform.apiUrl!;
  acme = await createAccount(db.pool, base, 'Acme');
});
afterAll(async () => {
  await platform.stop();
  await db.drop();
});

describe('body-less POSTs', () => {
  it('an empty body sent as application/json is no body, not a 400', async () => {
    const endpoint = await acme.post('/v1/webhook_endpoints', { url: 'https://example.com/hooks' });
    expect(endpoint.status).toBe(201);
    const rotated = await request(
      base,
      'POST',
      `/v1/webhook_endpoints/${endpoint.json.id}/rotate_secret`,
      acme.key,
      '',
    );
    expect(rotated.status).toBe(200);
    expect(rotated.json.secret).not.toBe(endpoint.json.secret);
  });

  it('a create that needs a body still refuses an empty one with 422 and creates nothing', async () => {
    const res = await request(base, 'POST', '/v1/webhook_endpoints', acme.key, '');
    expect(res.status).toBe(422);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await count(db.pool, 'SELECT * FROM webhook_endpoints WHERE account_id = $1', [acme.accountId])).toBe(1);
  });

  it('malformed JSON is still a 400', async () => {
    const res = await request(base, 'POST', '/v1/webhook_endpoints', acme.key, '{"url":');
    expect(res.status).toBe(400);
  });
});

describe('the Authorization header', () => {
  it.each(['bearer', 'BEARER', 'Bearer'])('the %s scheme authenticates', async (scheme) => {
    const res = await request(base, 'GET', '/v1/messages', null, undefined, { authorization: `${scheme} ${acme.key}` });
    expect(res.status).toBe(200);
  });

  it('the key itself is not case-insensitive', async () => {
    const res = await request(base, 'GET', '/v1/messages', null, undefined, {
      authorization: `Bearer ${acme.key.toUpperCase()}`,
    });
    expect(res.status).toBe(401);
  });
});

describe('lists, filters and periods', () => {
  it('an unknown cursor, or one of another account, is 404 resource_missing naming starting_after, not the first page', async () => {
    const other = await createAccount(db.pool, base, 'Other');
    const theirs = await other.post('/v1/tenants', { name: 'theirs' });
    for (const cursor of ['msg_01aaaaaaaaaaaaaaaaaaaaaaaaaa', 'nope', theirs.json.id]) {
      for (const list of ['/v1/messages', '/v1/tenants', '/v1/calls', '/v1/events', '/v1/webhook_endpoints']) {
        const res = await acme.get(`${list}?starting_after=${encodeURIComponent(cursor)}`);
        expect(res.status, `${list} ${cursor}`).toBe(404);
        expect(res.json, `${list} ${cursor}`).toMatchObject({ code: 'resource_missing', param: 'starting_after' });
      }
    }
  });

  it('a cursor of the list pages after it', async () => {
    for (const name of ['a', 'b', 'c']) expect((await acme.post('/v1/tenants', { name })).status).toBe(201);
    const first = await acme.get('/v1/tenants?limit=2');
    const next = await acme.get(`/v1/tenants?limit=2&starting_after=${first.json.data[1].id}`);
    expect(next.status).toBe(200);
    expect(next.json.data[0].id < first.json.data[1].id).toBe(true);
  });

  it('an enum error lists the values allowed', async () => {
    const res = await acme.get('/v1/messages?status=bogus');
    expect(res.status).toBe(422);
    expect(res.json.param).toBe('status');
    expect(res.json.detail).toMatch(
      /^status: must be one of: scheduled, queued, sent, delivered, failed, canceled, received$/,
    );
  });

  it('a day is accepted where a period bound is meant: from its start, to its end', async () => {
    const day = await acme.get('/v1/usage?from=2026-12-01&to=2026-12-01');
    expect(day.status, JSON.stringify(day.json)).toBe(200);
    expect(day.json).toMatchObject({ from: '2026-12-01T00:00:00.000Z', to: '2026-12-02T00:00:00.000Z' });
    const mixed = await acme.get('/v1/usage?from=2026-11-30T12:00:00Z&to=2026-12-01');
    expect(mixed.json).toMatchObject({ from: '2026-11-30T12:00:00.000Z', to: '2026-12-02T00:00:00.000Z' });
    for (const bad of ['2026-02-30', '2026-12-1', 'yesterday']) {
      const res = await acme.get(`/v1/usage?from=${bad}`);
      expect(res.status, bad).toBe(422);
      expect(res.json.detail, bad).toMatch(/^from: must be an RFC 3339 date-time .* or a day/);
    }
  });
});
