// validity_period: a message that cannot leave for the carrier before its
// validity ends fails as `expired`, once: one message.failed, nothing billed, and
// the carrier never hears of it — whether it waited for a worker or for a carrier
// that asked us to slow down.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const OUR = '+13125550951';
const DELIVERS = '+15555550100';

let db: TestDatabase;
let sim: Simulator;
let api: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'validity' });
  api = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
  acme = await createAccount(db.pool, api.apiUrl!, 'Validity');
  expect((await acme.post('/v1/phone_numbers', { number: OUR })).status).toBe(201);
});
afterAll(async () => {
  await api.stop();
  await sim.close();
  await db.drop();
});

const requestsFor = (body: string) =>
  sim.requests.filter((r) => r.path === '/v2/messages' && (r.body as { text?: string }).text === body).length;
const failedEvents = (id: string) =>
  count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = $1 AND type = 'message.failed'`, [id]);
const bills = (id: string) => count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [id]);

async function withWorker<T>(fn: () => Promise<T>): Promise<T> {
  const worker = await startTestPlatform({ databaseUrl: db.url, roles: ['worker'], env: sim.carrierEnv() });
  try {
    return await fn();
  } finally {
    await worker.stop();
  }
}

describe('validity_period', () => {
  it('a bad period is refused and nothing is stored', async () => {
    for (const v of [0, 86_401, 'soon']) {
      const r = await acme.post('/v1/messages', { from: OUR, to: DELIVERS, body: 'x', validity_period: v });
      expect(r.status).toBe(422);
    }
    expect(await count(db.pool, 'SELECT * FROM messages')).toBe(0);
  });

  it('past its validity before a worker could take it: failed as expired, once, never sent, nothing billed', async () => {
    const short = (await acme.post('/v1/messages', { from: OUR, to: DELIVERS, body: 'short', validity_period: 1 }))
      .json;
    const long = (await acme.post('/v1/messages', { from: OUR, to: DELIVERS, body: 'long', validity_period: 600 }))
      .json;
    expect(Date.parse(short.expires_at) - Date.parse(short.created_at)).toBe(1_000);
    await new Promise((r) => setTimeout(r, 1_200));
    await withWorker(async () => {
      await eventually(async () => (await acme.get(`/v1/messages/${long.id}`)).json.status !== 'queued');
      await eventually(async () => (await acme.get(`/v1/messages/${short.id}`)).json.status === 'failed');
    });
    const m = (await acme.get(`/v1/messages/${short.id}`)).json;
    expect(m.error_code).toBe('expired');
    expect([await failedEvents(short.id), await bills(short.id), requestsFor('short')]).toEqual([1, 0, 0]);
    expect(requestsFor('long')).toBe(1);
  });

  it('past its validity while the carrier says slow down: failed as expired once, every request it made refused as not processed', async () => {
    sim.setBehaviour({ rateLimitRate: 1, retryAfterMs: 4_000 });
    try {
      const m = (await acme.post('/v1/messages', { from: OUR, to: DELIVERS, body: 'waits', validity_period: 2 })).json;
      await withWorker(async () => {
        await eventually(async () => (await acme.get(`/v1/messages/${m.id}`)).json.status === 'failed', 15_000);
        // Another pass of the dispatcher changes nothing.
        await new Promise((r) => setTimeout(r, 1_000));
      });
      expect((await acme.get(`/v1/messages/${m.id}`)).json.error_code).toBe('expired');
      const asked = sim.requests.filter((r) => r.path === '/v2/messages' && r.idempotencyKey === m.id);
      expect([await failedEvents(m.id), await bills(m.id)]).toEqual([1, 0]);
      expect(asked.length).toBeGreaterThan(0);
      expect(asked.filter((r) => r.status !== 429)).toEqual([]);
    } finally {
      sim.setBehaviour({ rateLimitRate: 0, retryAfterMs: 0 });
    }
  });
});
