// API keys an account manages itself: create (the secret once), list (never the
// secret), revoke (never the last key that lasts, unless forced), roll (the old key
// works for the overlap, then not: time as a parameter), another account's keys
// 404 to read, revoke or roll, bad input changing nothing, last_used_at written at most once a minute, and
// the same through `handset accounts keys`.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKeyCreate, apiKeyRevokeGuarded, lookupKey } from '../../src/accounts/accounts.js';
import { apiKeyTouch } from '../../src/accounts/accounts.sql.js';
import { withTx } from '../../src/db/tx.js';
import type { Platform } from '../../src/platform.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { runHandset } from '../support/process.js';

let db: TestDatabase;
let platform: Platform;
let base: string;
let acme: ApiClient;
let globex: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'] });
  base = platform.apiUrl!;
  acme = await createAccount(db.pool, base, 'Acme');
  globex = await createAccount(db.pool, base, 'Globex');
});
afterAll(async () => {
  await platform.stop();
  await db.drop();
});

const keyRows = (accountId: string) => count(db.pool, 'SELECT * FROM api_keys WHERE account_id = $1', [accountId]);
const as = (key: string) => ({
  get: (path: string) => request(base, 'GET', path, key),
  post: (path: string, body?: unknown, headers?: Record<string, string>) =>
    request(base, 'POST', path, key, body, headers),
  delete: (path: string) => request(base, 'DELETE', path, key),
});

describe('create and list', () => {
  it('a new key is shown once with its secret, works at once, and lists without any secret', async () => {
    const made = await acme.post('/v1/api_keys', { name: 'ci' });
    expect(made.status).toBe(201);
    expect(made.json).toMatchObject({
      id: expect.stringMatching(/^key_/),
      name: 'ci',
      last_used_at: null,
      expires_at: null,
    });
    expect(made.json.secret).toMatch(/^hsk_[A-Za-z0-9_-]{32}$/);
    expect((await as(made.json.secret).get('/v1/phone_numbers')).status).toBe(200);

    const list = await acme.get('/v1/api_keys');
    expect(list.status).toBe(200);
    expect(list.json.data.map((k: { id: string }) => k.id)).toContain(made.json.id);
    const text = JSON.stringify(list.json);
    expect(text).not.toContain(made.json.secret);
    expect(text).not.toContain(acme.key);
    expect(text).not.toMatch(/secret|prefix|hash/);
    expect(Object.keys(list.json.data[0]).sort()).toEqual(['created_at', 'expires_at', 'id', 'last_used_at', 'name']);
  });

  it('a body-less create makes an unnamed key; a replayed create answers the same key without its secret', async () => {
    const bare = await request(base, 'POST', '/v1/api_keys', acme.key);
    expect(bare.status).toBe(201);
    expect(bare.json.name).toBeNull();
    const first = await acme.post('/v1/api_keys', { name: 'once' }, { 'idempotency-key': 'key-1' });
    const again = await acme.post('/v1/api_keys', { name: 'once' }, { 'idempotency-key': 'key-1' });
    expect(first.json.secret).toMatch(/^hsk_/);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.json.id).toBe(first.json.id);
    expect(again.json.secret).toBeUndefined();
    expect(again.json.secret_omitted).toMatch(/only in the first response/);
    const { rows } = await db.pool.query('SELECT response_body::text AS body FROM idempotency_keys WHERE key = $1', [
      'key-1',
    ]);
    expect(rows[0].body).not.toContain(first.json.secret);
  });

  it('bad input is a clear 422 and makes no key', async () => {
    const before = await keyRows(acme.accountId);
    for (const [body, code] of [
      [{ name: '' }, 'invalid_request'],
      [{ name: 'x'.repeat(201) }, 'invalid_request'],
      [{ name: null }, 'invalid_request'],
      [{ colour: 'blue' }, 'unknown_field'],
    ] as const) {
      const res = await acme.post('/v1/api_keys', body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.json.code).toBe(code);
    }
    expect(await keyRows(acme.accountId)).toBe(before);
  });

  it('lists are cursor pages, newest first, of this account only', async () => {
    const team = await createAccount(db.pool, base, 'Team');
    const made = [];
    for (let i = 0; i < 4; i++) made.push((await team.post('/v1/api_keys', { name: `k${i}` })).json.id);
    const p1 = await team.get('/v1/api_keys?limit=2');
    expect(p1.json.data.map((k: { id: string }) => k.id)).toEqual([made[3], made[2]]);
    expect(p1.json.has_more).toBe(true);
    const p2 = await team.get(`/v1/api_keys?limit=2&starting_after=${made[2]}`);
    expect(p2.json.data.map((k: { id: string }) => k.id)).toEqual([made[1], made[0]]);
    const p3 = await team.get(`/v1/api_keys?limit=2&starting_after=${made[0]}`);
    expect(p3.json.data).toHaveLength(1); // the key the account was made with
    expect(p3.json.has_more).toBe(false);
    const theirs = JSON.stringify((await globex.get('/v1/api_keys?limit=100')).json);
    for (const id of made) expect(theirs).not.toContain(id);
  });
});

describe('revoke', () => {
  it('a revoked key is refused at once and is gone from the list; revoking it again is 404', async () => {
    const made = (await acme.post('/v1/api_keys', { name: 'leaked' })).json;
    const leaked = as(made.secret);
    expect((await leaked.get('/v1/phone_numbers')).status).toBe(200);
    const res = await acme.delete(`/v1/api_keys/${made.id}`);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ id: made.id, deleted: true });
    expect((await leaked.get('/v1/phone_numbers')).status).toBe(401);
    expect(JSON.stringify((await acme.get('/v1/api_keys?limit=100')).json)).not.toContain(made.id);
    expect((await acme.delete(`/v1/api_keys/${made.id}`)).status).toBe(404);
  });

  it("another account's key is 404 to revoke or roll, and keeps working", async () => {
    const theirs = (await globex.post('/v1/api_keys', { name: 'theirs' })).json;
    const own = await globex.get(`/v1/api_keys/${theirs.id}`);
    expect(own.status).toBe(200);
    expect(own.json).toEqual({
      id: theirs.id,
      name: 'theirs',
      created_at: theirs.created_at,
      last_used_at: null,
      expires_at: null,
    });
    for (const res of [
      await acme.get(`/v1/api_keys/${theirs.id}`),
      await acme.delete(`/v1/api_keys/${theirs.id}`),
      await acme.delete(`/v1/api_keys/${theirs.id}?force=true`),
      await acme.post(`/v1/api_keys/${theirs.id}/roll`, {}),
    ]) {
      expect(res.status).toBe(404);
      expect(res.json.code).toBe('resource_not_found');
    }
    expect((await as(theirs.secret).get('/v1/phone_numbers')).status).toBe(200);
    const { rows } = await db.pool.query('SELECT revoked_at, expires_at FROM api_keys WHERE id = $1', [theirs.id]);
    expect(rows[0]).toEqual({ revoked_at: null, expires_at: null });
  });

  it('the last key that lasts is revoked only with force=true', async () => {
    const solo = await createAccount(db.pool, base, 'Solo');
    const [{ id }] = (await solo.get('/v1/api_keys')).json.data;
    const refused = await solo.delete(`/v1/api_keys/${id}`);
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({ code: 'last_api_key', status: 409 });
    expect(refused.json.detail).toMatch(/force=true/);
    expect((await solo.get('/v1/phone_numbers')).status).toBe(200);
    expect((await solo.delete(`/v1/api_keys/${id}?force=false`)).status).toBe(409);
    expect((await solo.delete(`/v1/api_keys/${id}?force=maybe`)).status).toBe(422);
    // A key that only works through a roll's overlap does not count as one that stays.
    const rolled = (await solo.post(`/v1/api_keys/${id}/roll`, {})).json;
    expect((await as(rolled.secret).delete(`/v1/api_keys/${rolled.id}`)).status).toBe(409);
    expect((await as(rolled.secret).delete(`/v1/api_keys/${rolled.id}?force=true`)).status).toBe(200);
    expect((await as(rolled.secret).get('/v1/phone_numbers')).status).toBe(401);
    expect((await solo.delete(`/v1/api_keys/${id}?force=true`)).status).toBe(200);
    expect((await solo.get('/v1/phone_numbers')).status).toBe(401);
  });

  it('two revokes at once of an account’s two lasting keys: one applies, the other is refused', async () => {
    const pair = await createAccount(db.pool, base, 'Pair');
    const second = (await pair.post('/v1/api_keys', { name: 'second' })).json;
    const [first] = (await pair.get('/v1/api_keys')).json.data.filter((k: { id: string }) => k.id !== second.id);
    const now = new Date();
    const results = await Promise.all(
      [first.id, second.id].map((id) =>
        withTx(db.pool, (tx) => apiKeyRevokeGuarded(tx, pair.accountId, id, { force: false, now })),
      ),
    );
    expect(results.map((r) => (r.applied ? 'applied' : r.reason)).sort()).toEqual(['applied', 'last_key']);
    expect(
      await count(db.pool, 'SELECT * FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL', [pair.accountId]),
    ).toBe(1);
  });
});

describe('roll', () => {
  it('a new key with the same name; the old one works through the overlap and not after it', async () => {
    const old = (await acme.post('/v1/api_keys', { name: 'deploy' })).json;
    const before = Date.now();
    const res = await acme.post(`/v1/api_keys/${old.id}/roll`, { expires_in_seconds: 3600 });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({ name: 'deploy', expires_at: null, secret: expect.stringMatching(/^hsk_/) });
    expect(res.json.id).not.toBe(old.id);
    expect((await as(old.secret).get('/v1/phone_numbers')).status).toBe(200);
    expect((await as(res.json.secret).get('/v1/phone_numbers')).status).toBe(200);

    const listed = (await acme.get('/v1/api_keys?limit=100')).json.data.find((k: { id: string }) => k.id === old.id);
    const ends = Date.parse(listed.expires_at);
    expect(ends).toBeGreaterThanOrEqual(before + 3600_000 - 1000);
    expect(ends).toBeLessThanOrEqual(Date.now() + 3600_000);
    // Time as a parameter: just before its end it opens the account, at its end it does not.
    expect(await lookupKey(db.pool, old.secret, new Date(ends - 1))).toMatchObject({ apiKeyId: old.id });
    expect(await lookupKey(db.pool, old.secret, new Date(ends))).toBeNull();
    expect(await lookupKey(db.pool, res.json.secret, new Date(ends + 86_400_000))).toMatchObject({
      apiKeyId: res.json.id,
    });
  });

  it('the default overlap is 24 h; 0 ends the old key at once; a roll never lengthens an overlap', async () => {
    const old = (await acme.post('/v1/api_keys')).json;
    const before = Date.now();
    await request(base, 'POST', `/v1/api_keys/${old.id}/roll`, acme.key); // no body at all
    const ends = async () =>
      (await db.pool.query('SELECT expires_at FROM api_keys WHERE id = $1', [old.id])).rows[0].expires_at.getTime();
    expect(await ends()).toBeGreaterThanOrEqual(before + 86_400_000 - 1000);
    expect(await ends()).toBeLessThanOrEqual(Date.now() + 86_400_000);
    const first = await ends();
    await acme.post(`/v1/api_keys/${old.id}/roll`, { expires_in_seconds: 2_000_000 });
    expect(await ends()).toBe(first);
    const now = await acme.post(`/v1/api_keys/${old.id}/roll`, { expires_in_seconds: 0 });
    expect(now.status).toBe(201);
    expect((await as(old.secret).get('/v1/phone_numbers')).status).toBe(401);
    expect((await acme.post(`/v1/api_keys/${old.id}/roll`, {})).status).toBe(404);
    expect((await acme.delete(`/v1/api_keys/${old.id}`)).status).toBe(404);
  });

  it('a bad overlap is a clear 422 and changes nothing', async () => {
    const old = (await acme.post('/v1/api_keys')).json;
    const before = await keyRows(acme.accountId);
    for (const body of [
      { expires_in_seconds: -1 },
      { expires_in_seconds: 30 * 86_400 + 1 },
      { expires_in_seconds: 1.5 },
      { name: 'x' },
    ]) {
      const res = await acme.post(`/v1/api_keys/${old.id}/roll`, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
    }
    expect(await keyRows(acme.accountId)).toBe(before);
    const { rows } = await db.pool.query('SELECT expires_at FROM api_keys WHERE id = $1', [old.id]);
    expect(rows[0].expires_at).toBeNull();
  });
});

describe('last_used_at', () => {
  it('is set when a key is used, and written at most once a minute however often it is used', async () => {
    const made = (await acme.post('/v1/api_keys', { name: 'busy' })).json;
    const key = as(made.secret);
    await Promise.all(Array.from({ length: 20 }, () => key.get('/v1/phone_numbers')));
    const first = await eventually(async () => {
      const { rows } = await db.pool.query('SELECT last_used_at, xmin::text AS version FROM api_keys WHERE id = $1', [
        made.id,
      ]);
      return rows[0].last_used_at ? rows[0] : null;
    });
    await Promise.all(Array.from({ length: 20 }, () => key.get('/v1/phone_numbers')));
    const { rows } = await db.pool.query('SELECT last_used_at, xmin::text AS version FROM api_keys WHERE id = $1', [
      made.id,
    ]);
    expect(rows[0]).toEqual(first); // the same row version: no second write
    const listed = (await acme.get('/v1/api_keys?limit=100')).json.data.find((k: { id: string }) => k.id === made.id);
    expect(listed.last_used_at).toBe(first.last_used_at.toISOString());
  });

  it('the guard itself: a touch within the minute changes nothing, one after it moves the time', async () => {
    const { id } = await withTx(db.pool, (tx) => apiKeyCreate(tx, acme.accountId));
    const at = async () =>
      (await db.pool.query('SELECT last_used_at FROM api_keys WHERE id = $1', [id])).rows[0].last_used_at;
    const t0 = new Date('2030-01-01T00:00:00Z');
    await apiKeyTouch(db.pool, id, t0);
    await apiKeyTouch(db.pool, id, new Date(t0.getTime() + 59_000));
    expect(await at()).toEqual(t0);
    await apiKeyTouch(db.pool, id, new Date(t0.getTime() + 61_000));
    expect(await at()).toEqual(new Date(t0.getTime() + 61_000));
  });
});

describe('handset accounts keys', () => {
  const env = () => ({ DATABASE_URL: db.url });

  it('create, list and revoke an account’s keys from the command line', async () => {
    const made = await runHandset(
      ['accounts', 'keys', 'create', '--account', acme.accountId, '--name', 'ops', '--json'],
      env(),
    );
    expect(made.code).toBe(0);
    const key = JSON.parse(made.output.trim().split('\n').at(-1)!);
    expect(key).toMatchObject({
      id: expect.stringMatching(/^key_/),
      name: 'ops',
      secret: expect.stringMatching(/^hsk_/),
    });
    expect((await as(key.secret).get('/v1/phone_numbers')).status).toBe(200);

    const listed = await runHandset(['accounts', 'keys', 'list', '--account', acme.accountId, '--json'], env());
    expect(listed.code).toBe(0);
    const list = JSON.parse(listed.output.trim().split('\n').at(-1)!);
    expect(list.data.map((k: { id: string }) => k.id)).toContain(key.id);
    expect(listed.output).not.toContain(key.secret);
    const table = await runHandset(['accounts', 'keys', 'list', '--account', acme.accountId], env());
    expect(table.output).toMatch(new RegExp(`^${key.id}\\s+ops\\s+`, 'm'));

    const revoked = await runHandset(['accounts', 'keys', 'revoke', key.id, '--account', acme.accountId], env());
    expect(revoked.code).toBe(0);
    expect(revoked.output).toContain(`Revoked ${key.id}`);
    expect((await as(key.secret).get('/v1/phone_numbers')).status).toBe(401);
  });

  it('refuses the last lasting key without --force, an unknown key or account, with one line and exit 1', async () => {
    const solo = await createAccount(db.pool, base, 'Solo CLI');
    const [{ id }] = (await solo.get('/v1/api_keys')).json.data;
    const refused = await runHandset(['accounts', 'keys', 'revoke', id, '--account', solo.accountId], env());
    expect(refused.code).toBe(1);
    expect(refused.output.trim()).toMatch(/last key that does not expire.*--force/);
    expect((await solo.get('/v1/phone_numbers')).status).toBe(200);
    const unknown = await runHandset(['accounts', 'keys', 'revoke', 'key_nope', '--account', solo.accountId], env());
    expect(unknown.code).toBe(1);
    expect(unknown.output.trim()).toMatch(/no live API key key_nope/);
    const noAccount = await runHandset(['accounts', 'keys', 'list', '--account', 'acct_nope'], env());
    expect(noAccount.code).toBe(1);
    expect(noAccount.output.trim()).toMatch(/no account acct_nope/);
    const forced = await runHandset(['accounts', 'keys', 'revoke', id, '--account', solo.accountId, '--force'], env());
    expect(forced.code).toBe(0);
    expect((await solo.get('/v1/phone_numbers')).status).toBe(401);
  });
});
