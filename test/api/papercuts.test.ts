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
