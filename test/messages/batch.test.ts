// Batch creation: up to 1,000 messages in one request, each item taken exactly as
// POST /v1/messages takes its body and answered in its place — created, or refused
// with the very problem the single create gives it — every created one stored with
// its dispatch job in one transaction, under one Idempotency-Key for the batch,
// with the account's numbers and opt-outs read once for all its items.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DISPATCH_KEY_PREFIX } from '../../src/jobs/keys.js';
import { createMessages } from '../../src/messages/messages.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { inRolledBackTx } from '../support/factory.js';
import { startTestPlatform } from '../support/platform.js';

const OURS = '+13125550501';
const OUR_SECOND = '+13125550502';
const THEIRS = '+13125550601';
const RECIPIENT = (i: number) => `+1415555${String(i).padStart(4, '0')}`;

let db: TestDatabase;
let sim: Simulator;
let api: Platform;
let acme: ApiClient;
let globex: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'batch' });
  // No worker: what a batch leaves behind (messages, history, jobs) stays to be counted. Dispatched
  // by jobs, so each message's dispatch is a row to count; the batched dispatcher takes the same rows
  // from the line (test/messages/batched-dispatch).
  api = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api'],
    env: { ...sim.carrierEnv(), HANDSET_DISPATCH: 'jobs' },
  });
  acme = await createAccount(db.pool, api.apiUrl!, 'Acme');
  globex = await createAccount(db.pool, api.apiUrl!, 'Globex');
  for (const number of [OURS, OUR_SECOND]) expect((await acme.post('/v1/phone_numbers', { number })).status).toBe(201);
  expect((await globex.post('/v1/phone_numbers', { number: THEIRS })).status).toBe(201);
});
afterAll(async () => {
  await api.stop();
  await sim.close();
  await db.drop();
});

/** Everything a batch could have written, for one account: messages, their history, their jobs, events. */
async function written(accountId: string) {
  const messages = `SELECT id FROM messages WHERE account_id = $1`;
  return {
    messages: await count(db.pool, messages, [accountId]),
    history: await count(db.pool, `SELECT * FROM message_status_history WHERE message_id IN (${messages})`, [
      accountId,
    ]),
    jobs: await count(
      db.pool,
      `SELECT * FROM graphile_worker._private_jobs WHERE key IN (SELECT $2 || id FROM messages WHERE account_id = $1)`,
      [accountId, DISPATCH_KEY_PREFIX],
    ),
    events: await count(db.pool, "SELECT * FROM outbound_events WHERE account_id = $1 AND type LIKE 'message.%'", [
      accountId,
    ]),
  };
}

async function clear(accountId: string) {
  await db.pool.query(
    'DELETE FROM graphile_worker._private_jobs WHERE key IN (SELECT $2 || id FROM messages WHERE account_id = $1)',
    [accountId, DISPATCH_KEY_PREFIX],
  );
  await db.pool.query(
    'DELETE FROM message_status_history WHERE message_id IN (SELECT id FROM messages WHERE account_id = $1)',
    [accountId],
  );
  await db.pool.query('DELETE FROM messages WHERE account_id = $1', [accountId]);
}

describe('a batch of valid messages', () => {
  it('1,000 messages are 1,000 queued messages, 1,000 history entries and 1,000 dispatch jobs, in one transaction', async () => {
    await clear(acme.accountId);
    const items = Array.from({ length: 1000 }, (_, i) => ({ from: OURS, to: RECIPIENT(i), body: `Hello ${i}` }));
    const res = await acme.post('/v1/messages/batch', { messages: items });
    expect(res.status).toBe(201);
    const data = res.json.data as { index: number; message?: { id: string; to: string; status: string } }[];
    expect(data.map((d) => d.index)).toEqual(items.map((_, i) => i));
    expect(data.map((d) => d.message?.to)).toEqual(items.map((m) => m.to));
    expect(new Set(data.map((d) => d.message?.status))).toEqual(new Set(['queued']));
    expect(await written(acme.accountId)).toEqual({ messages: 1000, history: 1000, jobs: 1000, events: 0 });

    // One transaction wrote them all: every row carries the same transaction id.
    const { rows } = await db.pool.query<{ messages: string[]; jobs: string[] }>(
      `SELECT (SELECT array_agg(DISTINCT xmin::text) FROM messages WHERE account_id = $1) AS messages,
              (SELECT array_agg(DISTINCT j.xmin::text) FROM graphile_worker._private_jobs j
                 JOIN messages m ON j.key = $2 || m.id WHERE m.account_id = $1) AS jobs`,
      [acme.accountId, DISPATCH_KEY_PREFIX],
    );
    expect(rows[0]!.messages).toHaveLength(1);
    expect(rows[0]!.jobs).toEqual(rows[0]!.messages);

    // In the dispatch line in the order given, as 1,000 single creates would be: consecutive places, each job at its own.
    const line = await db.pool.query<{ to_number: string; dispatch_rank: number; priority: number }>(
      `SELECT m.to_number, m.dispatch_rank, j.priority FROM messages m
         JOIN graphile_worker._private_jobs j ON j.key = $2 || m.id
        WHERE m.account_id = $1 ORDER BY m.dispatch_rank`,
      [acme.accountId, DISPATCH_KEY_PREFIX],
    );
    expect(line.rows.map((r) => r.to_number)).toEqual(items.map((m) => m.to));
    const first = line.rows[0]!.dispatch_rank;
    expect(line.rows.map((r) => r.dispatch_rank)).toEqual(items.map((_, i) => first + i));
    expect(line.rows.every((r) => r.priority === r.dispatch_rank)).toBe(true);
  });

  it('a scheduled item waits for its send_at, out of the line; the queued ones around it keep consecutive places', async () => {
    await clear(acme.accountId);
    const sendAt = new Date(Date.now() + 3_600_000).toISOString();
    const res = await acme.post('/v1/messages/batch', {
      messages: [
        { from: OURS, to: RECIPIENT(1), body: 'now' },
        { from: OURS, to: RECIPIENT(2), body: 'later', send_at: sendAt },
        { from: OURS, to: RECIPIENT(3), body: 'now too' },
      ],
    });
    expect(res.status).toBe(201);
    expect(res.json.data.map((d: { message: { status: string } }) => d.message.status)).toEqual([
      'queued',
      'scheduled',
      'queued',
    ]);
    const { rows } = await db.pool.query<{ body: string; dispatch_rank: number | null; run_at: Date }>(
      `SELECT m.body, m.dispatch_rank, j.run_at FROM messages m JOIN graphile_worker._private_jobs j ON j.key = $2 || m.id
        WHERE m.account_id = $1 ORDER BY m.body`,
      [acme.accountId, DISPATCH_KEY_PREFIX],
    );
    const [later, now, nowToo] = rows;
    expect(later!.dispatch_rank).toBeNull();
    expect(later!.run_at.toISOString()).toBe(sendAt);
    expect(nowToo!.dispatch_rank).toBe(now!.dispatch_rank! + 1);
  });

  it('asks the database as many statements for 1,000 messages as for one: numbers and opt-outs are read once for all', async () => {
    const statements = (n: number) =>
      inRolledBackTx(db.pool, async (tx) => {
        let asked = 0;
        const query = tx.query.bind(tx);
        (tx as { query: unknown }).query = (...args: Parameters<typeof query>) => {
          asked++;
          return query(...args);
        };
        const items = Array.from({ length: n }, (_, i) => ({
          from: i % 2 ? OURS : OUR_SECOND,
          to: RECIPIENT(i),
          body: 'Counted',
          mediaUrls: [],
          sendAt: null,
        }));
        const made = await createMessages(tx, acme.accountId, items, new Date(), 'jobs');
        expect(made.filter((m) => 'id' in m)).toHaveLength(n);
        return asked;
      });
    expect(await statements(1000)).toBe(await statements(1));
  });
});

describe('an invalid item', () => {
  // Each refused for a reason of its own, in the order POST /v1/messages checks them.
  const INVALID = [
    { from: OURS, to: RECIPIENT(1), text: 'Hello' },
    { from: OURS, to: '+1312', body: 'Hello' },
    { from: OURS, body: 'Hello' },
    { from: OURS, to: RECIPIENT(1), body: 'x'.repeat(1601) },
    { from: OURS, to: RECIPIENT(1), body: 'Hello', media_urls: ['http://example.com/a.png'] },
    { from: OURS, to: RECIPIENT(1), body: 'Hello', send_at: '2020-01-01T00:00:00Z' },
    { from: OURS, to: RECIPIENT(1) },
    { from: OURS, to: RECIPIENT(1), body: 7 },
    { from: '+13125550599', to: RECIPIENT(1), body: 'Hello' },
  ];

  it('is answered in its place with the problem POST /v1/messages gives it, the valid rest stored, nothing else', async () => {
    await clear(acme.accountId);
    const valid = (i: number) => ({ from: OURS, to: RECIPIENT(100 + i), body: `Fine ${i}` });
    const items = INVALID.flatMap((bad, i) => [valid(i), bad]);
    const res = await acme.post('/v1/messages/batch', { messages: items });
    expect(res.status).toBe(201);
    const data = res.json.data as { index: number; message?: { to: string }; error?: object }[];
    expect(data.map((d) => d.index)).toEqual(items.map((_, i) => i));
    for (const [i, bad] of INVALID.entries()) {
      expect(data[2 * i]!.message?.to).toBe(valid(i).to);
      const alone = await acme.post('/v1/messages', bad);
      expect(alone.status, JSON.stringify(bad)).toBe(422);
      expect(data[2 * i + 1], JSON.stringify(bad)).toEqual({ index: 2 * i + 1, error: alone.json });
    }
    const n = INVALID.length;
    expect(await written(acme.accountId)).toEqual({ messages: n, history: n, jobs: n, events: 0 });
  });

  it('an item that is not an object is 422 invalid_request in its place', async () => {
    await clear(acme.accountId);
    const res = await acme.post('/v1/messages/batch', {
      messages: ['Hello', { from: OURS, to: RECIPIENT(1), body: 'Hi' }],
    });
    expect(res.status).toBe(201);
    expect(res.json.data[0]).toMatchObject({
      index: 0,
      error: { status: 422, code: 'invalid_request', detail: 'must be object' },
    });
    expect(res.json.data[1].message.body).toBe('Hi');
    expect(await written(acme.accountId)).toEqual({ messages: 1, history: 1, jobs: 1, events: 0 });
  });

  it('text holding a NUL, which the database cannot store, is answered in its place as the single create answers it', async () => {
    await clear(acme.accountId);
    const nul = { from: OURS, to: RECIPIENT(1), body: 'a\u0000b' };
    const res = await acme.post('/v1/messages/batch', {
      messages: [nul, { from: OURS, to: RECIPIENT(2), body: 'Hi' }],
    });
    expect(res.status).toBe(201);
    const alone = await acme.post('/v1/messages', nul);
    expect(alone.status).toBe(400);
    expect(res.json.data[0]).toEqual({ index: 0, error: alone.json });
    expect(await written(acme.accountId)).toEqual({ messages: 1, history: 1, jobs: 1, events: 0 });
  });

  it('a batch of nothing but invalid items stores nothing', async () => {
    await clear(acme.accountId);
    const res = await acme.post('/v1/messages/batch', { messages: INVALID });
    expect(res.status).toBe(201);
    expect(res.json.data.every((d: { error?: { status: number } }) => d.error?.status === 422)).toBe(true);
    expect(await written(acme.accountId)).toEqual({ messages: 0, history: 0, jobs: 0, events: 0 });
  });

  it('the batch takes its items by the single create’s own schema: the document says so by reference', async () => {
    const doc = (await acme.get('/openapi.json')).json;
    const body = (path: string) => doc.paths[path].post.requestBody.content['application/json'].schema;
    expect(body('/v1/messages')).toEqual({ $ref: '#/components/schemas/CreateMessageRequest' });
    expect(body('/v1/messages/batch').properties.messages.items).toEqual(body('/v1/messages'));
  });
});

describe('a batch refused whole', () => {
  it.each([
    [
      'more than 1,000 items',
      { messages: Array.from({ length: 1001 }, () => ({ from: OURS, to: RECIPIENT(1), body: 'x' })) },
      'invalid_batch_size',
      'messages',
    ],
    ['no items', { messages: [] }, 'invalid_batch_size', 'messages'],
    ['no messages', { message: [{ from: OURS, to: RECIPIENT(1), body: 'x' }] }, 'invalid_request', 'messages'],
    ['a list, not a batch', [{ from: OURS, to: RECIPIENT(1), body: 'x' }], 'invalid_request', undefined],
  ])('%s: 422 %s, nothing stored', async (_what, body, code, param) => {
    await clear(acme.accountId);
    const res = await acme.post('/v1/messages/batch', body);
    expect(res.status).toBe(422);
    expect(res.json.code).toBe(code);
    expect(res.json.param).toBe(param);
    expect(await written(acme.accountId)).toEqual({ messages: 0, history: 0, jobs: 0, events: 0 });
  });

  it('a body over the batch’s limit: 413 body_too_large, nothing stored', async () => {
    await clear(acme.accountId);
    const big = {
      from: OURS,
      to: RECIPIENT(1),
      body: '€'.repeat(1600),
      media_urls: [`https://example.com/${'a'.repeat(2000)}`],
    };
    const res = await acme.post('/v1/messages/batch', { messages: Array.from({ length: 1000 }, () => big) });
    expect(res.status).toBe(413);
    expect(res.json.code).toBe('body_too_large');
    expect(await written(acme.accountId)).toEqual({ messages: 0, history: 0, jobs: 0, events: 0 });
  });
});

describe("the batch's Idempotency-Key", () => {
  it('replayed, it answers the first answer again and creates nothing; with another batch, 422', async () => {
    await clear(acme.accountId);
    const batch = {
      messages: [
        { from: OURS, to: RECIPIENT(1), body: 'Once' },
        { from: OURS, to: '+1312', body: 'Never' },
        { from: OURS, to: RECIPIENT(2), body: 'Once more' },
      ],
    };
    const key = { 'idempotency-key': `batch-${Date.now()}` };
    const first = await acme.post('/v1/messages/batch', batch, key);
    expect(first.status).toBe(201);
    const before = await written(acme.accountId);
    expect(before).toEqual({ messages: 2, history: 2, jobs: 2, events: 0 });

    const again = await acme.post('/v1/messages/batch', batch, key);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.json).toEqual(first.json);
    expect(await written(acme.accountId)).toEqual(before);

    const other = await acme.post('/v1/messages/batch', { messages: batch.messages.slice(0, 1) }, key);
    expect(other.status).toBe(422);
    expect(other.json.code).toBe('idempotency_key_reused');
    expect(await written(acme.accountId)).toEqual(before);
  });
});

describe('numbers and opt-outs', () => {
  it("another account's number, as from or fallback_from, is refused in its place; nothing is written to either account", async () => {
    await clear(acme.accountId);
    await clear(globex.accountId);
    const res = await acme.post('/v1/messages/batch', {
      messages: [
        { from: THEIRS, to: RECIPIENT(1), body: 'Not mine' },
        { from: OURS, to: RECIPIENT(2), body: 'Mine', fallback_from: THEIRS },
      ],
    });
    expect(res.status).toBe(201);
    expect(res.json.data.map((d: { error: { code: string; param: string } }) => [d.error.code, d.error.param])).toEqual(
      [
        ['from_not_owned', 'from'],
        ['invalid_fallback', 'fallback_from'],
      ],
    );
    expect(await written(acme.accountId)).toEqual({ messages: 0, history: 0, jobs: 0, events: 0 });
    expect(await written(globex.accountId)).toEqual({ messages: 0, history: 0, jobs: 0, events: 0 });
  });

  it('an opted-out recipient is refused as the single create refuses them, only from the number they left', async () => {
    await clear(acme.accountId);
    const stopped = RECIPIENT(900);
    expect((await acme.post('/v1/opt_outs', { number: OURS, recipient: stopped })).status).toBe(201);
    // Globex's opt-outs are Globex's: the same recipient from Globex's number says nothing about Acme's.
    expect((await globex.post('/v1/opt_outs', { number: THEIRS, recipient: RECIPIENT(901) })).status).toBe(201);
    const items = [
      { from: OURS, to: stopped, body: 'Refused' },
      { from: OUR_SECOND, to: stopped, body: 'Another number of ours: fine' },
      { from: OURS, to: RECIPIENT(901), body: 'Fine' },
    ];
    const res = await acme.post('/v1/messages/batch', { messages: items });
    expect(res.status).toBe(201);
    const alone = await acme.post('/v1/messages', items[0]);
    expect(alone.json.code).toBe('recipient_opted_out');
    expect(res.json.data[0]).toEqual({ index: 0, error: alone.json });
    expect(res.json.data.slice(1).map((d: { message: { to: string } }) => d.message.to)).toEqual([
      stopped,
      RECIPIENT(901),
    ]);
    expect(await written(acme.accountId)).toEqual({ messages: 2, history: 2, jobs: 2, events: 0 });
    expect(await count(db.pool, 'SELECT * FROM usage_records WHERE account_id = $1', [acme.accountId])).toBe(0);
  });
});
