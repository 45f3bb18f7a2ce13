// The send window: the carrier may have accepted a message whose answer we never
// read, or read and could not record. Every retry carries the message id as its
// Idempotency-Key and the same bytes, so the carrier answers it with the first send
// instead of sending again, and a message is failed only once the carrier would no
// longer replay that answer. The dispatcher runs by hand against the simulator,
// which counts what it accepted and what it replayed.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { CARRIER_REPLAY_WINDOW_MS, retryPolicies } from '../../src/jobs/retry.js';
import { dispatchMessage, OUTCOME_UNKNOWN } from '../../src/messages/dispatch.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { telnyxCarriers } from '../support/carrier.js';

const OUR = '+13125550800';
const SILENT = '+14155550801'; // a recipient whose receipts the test does not care about
const log = createLogger('silent');
const policy = retryPolicies(3000).dispatch;

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, seed: 'send-window' });
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
  acme = await createAccount(db.pool, platform.apiUrl!, 'Window');
  expect((await acme.post('/v1/phone_numbers', { number: OUR })).status).toBe(201);
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const client = (timeoutMs = 10_000) => telnyxCarriers({ apiUrl: sim.url, apiKey: sim.apiKey, timeoutMs });
const deps = (over: Partial<Parameters<typeof dispatchMessage>[0]> = {}) => ({
  pool: db.pool,
  carriers: client(),
  log,
  policy,
  ...over,
});
const create = async (body = 'window') =>
  (await acme.post('/v1/messages', { from: OUR, to: SILENT, body })).json.id as string;
const sends = (id: string) => sim.requests.filter((r) => r.path === '/v2/messages' && r.idempotencyKey === id);
const accepted = (id: string) => sends(id).filter((r) => r.status === 200 && !r.replayed).length;
const replayed = (id: string) => sends(id).filter((r) => r.replayed).length;
const message = async (id: string) => (await acme.get(`/v1/messages/${id}`)).json;
const sentEvents = (id: string) =>
  count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = $1 AND type = 'message.sent'`, [id]);
const bills = (id: string) => count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [id]);

describe('the send window', () => {
  it('the carrier accepts, then our commit fails: the retry is a replay, one accepted send, one message.sent, billed once', async () => {
    const proxy = await startTcpProxy('127.0.0.1', Number(new URL(db.url).port));
    const proxied = new URL(db.url);
    proxied.port = String(proxy.port);
    const pool = createPool(proxied.toString(), { max: 2, applicationName: 'send-window' });
    try {
      const id = await create();
      sim.setBehaviour({ answerDelayMs: 800 });
      const first = dispatchMessage(deps({ pool }), id);
      // The carrier has acted; its answer is on its way. Our database goes away now.
      await eventually(async () => sends(id).some((r) => r.status === 200), 5_000, 10);
      proxy.cut();
      await expect(first).rejects.toThrow();
      proxy.restore();
      sim.setBehaviour({ answerDelayMs: 0 });
      // The job runs again (graphile-worker retries a job that threw).
      expect(await dispatchMessage(deps(), id, 1)).toBe('sent');
      expect(accepted(id)).toBe(1);
      expect(replayed(id)).toBe(1);
      expect(new Set(sends(id).map((r) => JSON.stringify(r.body))).size).toBe(1); // the same bytes each time
      expect((await message(id)).status).toBe('sent');
      expect(await sentEvents(id)).toBe(1);
      expect(await bills(id)).toBe(1);
    } finally {
      await pool.end();
      await proxy.close();
    }
  });

  it('a 200 whose body stalls is an unknown outcome: retried with the same key, never a second accepted send', async () => {
    const id = await create();
    sim.setBehaviour({ stalledBodyRate: 1 });
    expect(await dispatchMessage(deps({ carriers: client(500) }), id, 1)).toBe('retrying');
    sim.setBehaviour({ stalledBodyRate: 0 });
    expect(await dispatchMessage(deps(), id, 2)).toBe('sent');
    expect(accepted(id)).toBe(1);
    expect(replayed(id)).toBe(1);
    expect(await sentEvents(id)).toBe(1);
  });

  it('twelve timeouts in a row never fail the message; when an answer comes it is the first send’s', async () => {
    const id = await create();
    sim.setBehaviour({ answerDelayMs: 1000 });
    for (let attempt = 1; attempt <= 12; attempt++) {
      expect(await dispatchMessage(deps({ carriers: client(200) }), id, attempt)).toBe('retrying');
    }
    expect((await message(id)).status).toBe('queued');
    sim.setBehaviour({ answerDelayMs: 0 });
    expect(await dispatchMessage(deps(), id, 13)).toBe('sent');
    expect(accepted(id)).toBe(1);
    expect(await sentEvents(id)).toBe(1);
    expect(await bills(id)).toBe(1);
  });

  it('past the carrier’s replay window an unknown outcome fails the message, saying the outcome is unknown', async () => {
    const id = await create();
    const { created_at: createdAt } = (await db.pool.query('SELECT created_at FROM messages WHERE id = $1', [id]))
      .rows[0];
    sim.setBehaviour({ lostAnswerRate: 1 });
    try {
      const atEnd = () => new Date(createdAt.getTime() + CARRIER_REPLAY_WINDOW_MS);
      expect(await dispatchMessage(deps({ now: atEnd }), id, 40)).toBe('gave_up');
    } finally {
      sim.setBehaviour({ lostAnswerRate: 0 });
    }
    expect(await message(id)).toMatchObject({ status: 'failed', error_code: OUTCOME_UNKNOWN });
    expect(
      await count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = $1 AND type = 'message.failed'`, [id]),
    ).toBe(1);
    expect(await bills(id)).toBe(0);
  });
});
