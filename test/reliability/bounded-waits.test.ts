// No role waits on the database without bound: each role's connections carry its
// own statement_timeout and lock_timeout. With carrier_events locked by another
// transaction (a whole-table lock, or an uncommitted row of the same event), a
// signed webhook gets a 503 once ingest's lock timeout has passed, never a 2xx
// and never a connection cut off with no answer; the carrier's retry after the
// lock is gone is stored once. The API answers 503 with Retry-After the same way,
// and the worker's transactions run under the worker's timeouts.

import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HandlerRegistry } from '../../src/carrier/process.js';
import type { Platform } from '../../src/platform.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { envelope, fixture, postWebhook, telnyxKeys } from '../support/carrier.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const keys = telnyxKeys();
const TIMEOUTS = {
  HANDSET_INGEST_STATEMENT_TIMEOUT: '800ms',
  HANDSET_INGEST_LOCK_TIMEOUT: '300ms',
  HANDSET_API_STATEMENT_TIMEOUT: '3s',
  HANDSET_API_LOCK_TIMEOUT: '400ms',
  HANDSET_WORKER_STATEMENT_TIMEOUT: '7s',
  HANDSET_WORKER_LOCK_TIMEOUT: '3s',
};
/** What ingest's server does to a request still unanswered after 15 s: it closes the connection. */
const INGEST_CONNECTION_TIMEOUT_MS = 15_000;

let db: TestDatabase;
let platform: Platform;
let hooks: string;
let client: ApiClient;
const workerSettings: Record<string, string>[] = [];

const handlers: HandlerRegistry = {
  'message.receipt': async (tx) => {
    const { rows } = await tx.query<{ statement_timeout: string; lock_timeout: string }>(
      `SELECT current_setting('statement_timeout') AS statement_timeout, current_setting('lock_timeout') AS lock_timeout`,
    );
    workerSettings.push(rows[0]!);
    return { outcome: 'applied' };
  },
};

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    keys,
    roles: ['ingest', 'api', 'worker'],
    env: TIMEOUTS,
    handlers,
  });
  hooks = `${platform.ingestUrl}/webhooks/telnyx`;
  client = await createAccount(db.pool, platform.apiUrl!, 'Bounded');
});
afterAll(async () => {
  await platform.stop();
  await db.drop();
});

/** Runs `sql` in a transaction of its own and keeps it open (and its locks held) until release(). */
async function holding(sql: string, values: unknown[] = []): Promise<{ release: () => Promise<void> }> {
  const c: pg.PoolClient = await db.pool.connect();
  await c.query('BEGIN');
  await c.query(sql, values);
  return {
    release: async () => {
      await c.query('ROLLBACK');
      c.release();
    },
  };
}

type Answer = Awaited<ReturnType<typeof postWebhook>> & { ms: number };

async function timed<T>(p: Promise<T>): Promise<T & { ms: number }> {
  const started = performance.now();
  const r = await p;
  return { ...r, ms: performance.now() - started };
}

const stored = (id: string) => count(db.pool, 'SELECT * FROM carrier_events WHERE carrier_event_id = $1', [id]);

describe('a locked carrier_events', () => {
  it('30 signed webhooks against a table lock each get 503 once the lock timeout has passed, not a reset; their retries are stored once', async () => {
    const lock = await holding('LOCK TABLE carrier_events IN EXCLUSIVE MODE');
    let answers: Answer[];
    try {
      answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) => timed(postWebhook(hooks, keys, envelope(`locked-${i}`)))),
      );
    } finally {
      await lock.release();
    }
    expect(answers.map((a) => [a.status, a.json])).toEqual(
      Array(30).fill([503, { error: 'unavailable', detail: 'try again' }]),
    );
    const ms = answers.map((a) => a.ms);
    console.log(
      `locked carrier_events: 30 webhooks answered 503 after ${Math.min(...ms).toFixed(0)}-${Math.max(...ms).toFixed(0)} ms`,
    );
    // each waited for the lock (its timeout is 300 ms), and was answered long before the connection would be closed
    expect(Math.min(...ms)).toBeGreaterThanOrEqual(290);
    expect(Math.max(...ms)).toBeLessThan(INGEST_CONNECTION_TIMEOUT_MS);
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'locked-%'`)).toBe(0);

    const retries = await Promise.all(
      Array.from({ length: 30 }, (_, i) => postWebhook(hooks, keys, envelope(`locked-${i}`))),
    );
    expect(retries.map((r) => r.json['status'])).toEqual(Array(30).fill('stored'));
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'locked-%'`)).toBe(30);
  });

  it('a webhook whose event another transaction is inserting (its row locked, uncommitted) gets 503, and its retry is stored once', async () => {
    const row = await holding(
      `INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload) VALUES ('telnyx', 'row-locked', 'x', '{}')`,
    );
    let answer: Answer;
    try {
      answer = await timed(postWebhook(hooks, keys, envelope('row-locked')));
    } finally {
      await row.release();
    }
    expect([answer.status, answer.json]).toEqual([503, { error: 'unavailable', detail: 'try again' }]);
    expect(answer.ms).toBeGreaterThanOrEqual(290);
    expect(await stored('row-locked')).toBe(0);
    expect((await postWebhook(hooks, keys, envelope('row-locked'))).json).toEqual({ status: 'stored' });
    expect((await postWebhook(hooks, keys, envelope('row-locked'))).json).toEqual({ status: 'duplicate' });
    expect(await stored('row-locked')).toBe(1);
  });
});

describe('the other roles', () => {
  it('the API answers 503 with Retry-After once its lock timeout has passed, and 200 when the lock is gone', async () => {
    const lock = await holding('LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE');
    let during: Awaited<ReturnType<ApiClient['get']>>;
    let ms: number;
    try {
      const started = performance.now();
      during = await client.get('/v1/tenants');
      ms = performance.now() - started;
    } finally {
      await lock.release();
    }
    expect(during.status).toBe(503);
    expect(during.json).toMatchObject({ code: 'service_unavailable' });
    expect(during.headers.get('retry-after')).toBe('1');
    expect(ms).toBeGreaterThanOrEqual(390);
    expect((await client.get('/v1/tenants')).status).toBe(200);
  });

  it("the worker's transactions run under the worker's statement and lock timeouts", async () => {
    expect((await postWebhook(hooks, keys, fixture('message-finalized-delivered'))).status).toBe(200);
    await eventually(async () => workerSettings.length > 0);
    expect(workerSettings[0]).toEqual({ statement_timeout: '7s', lock_timeout: '3s' });
  });
});
