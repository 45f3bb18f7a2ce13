// Revocation reaches every API process at once, though each answers recently
// seen keys from memory: two API processes on one database, a key cached in both,
// revoked or rolled through one and refused by the other within a bound (polled,
// no fixed sleep). The cache itself: answered without a lookup, expired keys
// refused from it by their own expires_at (time as a parameter), bounded in size,
// and not trusted while its LISTEN connection is down (cut with a proxy: a revoke
// whose notice could never arrive is still refused at once).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKeyCreate, apiKeyRoll } from '../../src/accounts/accounts.js';
import { apiKeyRevoke } from '../../src/accounts/accounts.sql.js';
import { Authenticator } from '../../src/accounts/auth.js';
import { withTx } from '../../src/db/tx.js';
import type { Platform } from '../../src/platform.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

let db: TestDatabase;
let one: Platform;
let two: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  [one, two] = await Promise.all([
    startTestPlatform({ databaseUrl: db.url, roles: ['api'] }),
    startTestPlatform({ databaseUrl: db.url, roles: ['api'] }),
  ]);
  acme = await createAccount(db.pool, one.apiUrl!, 'Acme');
});
afterAll(async () => {
  await Promise.all([one.stop(), two.stop()]);
  await db.drop();
});

/** How many key checks a process answered from its cache and from the database. */
async function checks(metrics: Metrics): Promise<{ cache: number; database: number }> {
  const { values } = await metrics.apiKeyAuth.get();
  const of = (via: string) => values.find((v) => v.labels.via === via)?.value ?? 0;
  return { cache: of('cache'), database: of('database') };
}

const use = (p: Platform, key: string) => request(p.apiUrl!, 'GET', '/v1/tenants', key);

/** A fresh key of Acme, used (and so cached) on the second process, which then answers it without a lookup. */
async function cachedOnTwo(): Promise<{ id: string; secret: string }> {
  const made = (await acme.post('/v1/api_keys', { name: 'shared' })).json;
  // A lookup that overlapped some other key's notice is not kept: use it until the cache answers.
  await eventually(async () => {
    const c = (await checks(two.metrics)).cache;
    expect((await use(two, made.secret)).status).toBe(200);
    return (await checks(two.metrics)).cache > c;
  });
  const before = await checks(two.metrics);
  for (let i = 0; i < 5; i++) expect((await use(two, made.secret)).status).toBe(200);
  const after = await checks(two.metrics);
  expect(after.database - before.database).toBe(0);
  expect(after.cache - before.cache).toBe(5);
  return { id: made.id, secret: made.secret };
}

/** Polls the second process until it refuses the key (at most 2 s); returns how long that took. */
async function refusedByTwo(secret: string): Promise<number> {
  const t0 = performance.now();
  await eventually(async () => (await use(two, secret)).status === 401, 2_000, 5);
  return performance.now() - t0;
}

describe('two API processes', () => {
  it('a key cached in both, revoked through one, is refused by the other at once', async () => {
    const key = await cachedOnTwo();
    expect((await use(one, key.secret)).status).toBe(200);
    expect((await request(one.apiUrl!, 'DELETE', `/v1/api_keys/${key.id}`, acme.key)).status).toBe(200);
    const ms = await refusedByTwo(key.secret);
    expect((await use(one, key.secret)).status).toBe(401);
    console.log(`revoked through one process, refused by the other after ${ms.toFixed(1)} ms`);
  });

  it('a roll with no overlap through one ends the old key in the other; with an overlap both work there', async () => {
    const gone = await cachedOnTwo();
    const rolled = await request(one.apiUrl!, 'POST', `/v1/api_keys/${gone.id}/roll`, acme.key, {
      expires_in_seconds: 0,
    });
    expect(rolled.status).toBe(201);
    await refusedByTwo(gone.secret);
    expect((await use(two, rolled.json.secret)).status).toBe(200);

    const kept = await cachedOnTwo();
    const overlap = await request(one.apiUrl!, 'POST', `/v1/api_keys/${kept.id}/roll`, acme.key, {
      expires_in_seconds: 3600,
    });
    expect((await use(two, kept.secret)).status).toBe(200);
    expect((await use(two, overlap.json.secret)).status).toBe(200);
  });

  it('the process that revokes or rolls a key refuses it on its next request, before the notice reaches it', async () => {
    // Stop the revoking process's listening backend, so its notice arrives only afterwards.
    const { rows } = await db.pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = 'handset-api-keys-listen'`,
    );
    const revoked = await cachedOnTwo();
    const rolled = await cachedOnTwo();
    for (const k of [revoked, rolled]) expect((await use(one, k.secret)).status).toBe(200);
    for (const { pid } of rows) process.kill(pid, 'SIGSTOP');
    try {
      expect((await request(one.apiUrl!, 'DELETE', `/v1/api_keys/${revoked.id}`, acme.key)).status).toBe(200);
      expect((await use(one, revoked.secret)).status).toBe(401);
      const roll = { expires_in_seconds: 0 };
      expect((await request(one.apiUrl!, 'POST', `/v1/api_keys/${rolled.id}/roll`, acme.key, roll)).status).toBe(201);
      expect((await use(one, rolled.secret)).status).toBe(401);
    } finally {
      for (const { pid } of rows) process.kill(pid, 'SIGCONT');
    }
    await refusedByTwo(revoked.secret);
    await refusedByTwo(rolled.secret);
  });

  it('a revoke made straight in the database (as handset accounts keys revoke does) reaches the other too', async () => {
    const key = await cachedOnTwo();
    await withTx(db.pool, (tx) => apiKeyRevoke(tx, acme.accountId, key.id));
    await refusedByTwo(key.secret);
  });
});

describe('the cache', () => {
  const log = createLogger('silent');

  it('refuses a cached key at its expires_at without asking the database, and stays within its size', async () => {
    const metrics = new Metrics({ scrapeToken: null });
    const auth = new Authenticator({ pool: db.pool, log, metrics, maxEntries: 3 });
    await auth.start();
    try {
      expect(auth.trusted).toBe(true);
      const made = await withTx(db.pool, (tx) => apiKeyCreate(tx, acme.accountId));
      const t0 = new Date();
      await withTx(db.pool, (tx) => apiKeyRoll(tx, acme.accountId, made.id, { overlapSeconds: 10, now: t0 }));
      // Until the roll's own notice has been heard, a lookup is not kept: ask until one is answered from the cache.
      await eventually(async () => {
        const c = (await checks(metrics)).cache;
        expect(await auth.authenticate(made.key, new Date(t0.getTime() + 1000))).toMatchObject({ apiKeyId: made.id });
        return (await checks(metrics)).cache > c;
      });
      const before = await checks(metrics);
      expect(await auth.authenticate(made.key, new Date(t0.getTime() + 9_999))).not.toBeNull();
      expect(await auth.authenticate(made.key, new Date(t0.getTime() + 10_000))).toBeNull();
      expect(await checks(metrics)).toEqual({ cache: before.cache + 2, database: before.database });

      for (let i = 0; i < 5; i++) {
        const k = await withTx(db.pool, (tx) => apiKeyCreate(tx, acme.accountId));
        expect(await auth.authenticate(k.key)).not.toBeNull();
        expect(auth.size).toBeLessThanOrEqual(3);
      }
    } finally {
      await auth.stop();
    }
  });

  it('is not trusted while its LISTEN connection is down: a revoke it could not hear of is refused at once', async () => {
    const target = new URL(db.url);
    const proxy = await startTcpProxy(target.hostname, Number(target.port));
    const viaProxy = new URL(db.url);
    viaProxy.port = String(proxy.port);
    const metrics = new Metrics({ scrapeToken: null });
    const auth = new Authenticator({ pool: db.pool, log, metrics, listenTo: viaProxy.toString() });
    await auth.start();
    try {
      expect(auth.trusted).toBe(true);
      expect((await metrics.apiKeyListener.get()).values[0]?.value).toBe(1);
      const made = await withTx(db.pool, (tx) => apiKeyCreate(tx, acme.accountId));
      await auth.authenticate(made.key);
      const cached = await checks(metrics);
      expect(await auth.authenticate(made.key)).not.toBeNull();
      expect((await checks(metrics)).cache).toBe(cached.cache + 1);

      proxy.cut();
      await eventually(async () => !auth.trusted, 5_000, 5);
      expect((await metrics.apiKeyListener.get()).values[0]?.value).toBe(0);
      // Every check asks the database while the listener is down...
      const down = await checks(metrics);
      expect(await auth.authenticate(made.key)).not.toBeNull();
      expect(await auth.authenticate(made.key)).not.toBeNull();
      expect(await checks(metrics)).toEqual({ cache: down.cache, database: down.database + 2 });
      // ...so a revoke whose notice goes nowhere is refused by the next request.
      await withTx(db.pool, (tx) => apiKeyRevoke(tx, acme.accountId, made.id));
      expect(await auth.authenticate(made.key)).toBeNull();

      proxy.restore();
      await eventually(async () => auth.trusted, 10_000, 20);
      const other = await withTx(db.pool, (tx) => apiKeyCreate(tx, acme.accountId));
      await auth.authenticate(other.key);
      const back = await checks(metrics);
      expect(await auth.authenticate(other.key)).not.toBeNull();
      expect(await checks(metrics)).toEqual({ cache: back.cache + 1, database: back.database });
    } finally {
      await auth.stop();
      await proxy.close();
    }
  });
});
