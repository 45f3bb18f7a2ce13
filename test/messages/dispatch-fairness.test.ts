// Fair dispatch: one account's campaign does not make another account's message,
// or its call's dial, wait behind it. The messages are created while no worker runs, then one worker
// with a single slot sends them, so the order it takes them in is the order they
// reach the carrier (dispatched_at), and the rules below count positions in it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const CAMPAIGN = 60;
const RECIPIENT = (i: number) => `+1415555${String(1000 + i).padStart(4, '0')}`;

let db: TestDatabase;
let sim: Simulator;
let api: Platform;
let acme: ApiClient;
let globex: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'dispatch-fairness' });
  api = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
  acme = await createAccount(db.pool, api.apiUrl!, 'Acme');
  globex = await createAccount(db.pool, api.apiUrl!, 'Globex');
  expect((await acme.post('/v1/phone_numbers', { number: '+13125550001' })).status).toBe(201);
  expect((await globex.post('/v1/phone_numbers', { number: '+13125550002' })).status).toBe(201);
});
afterAll(async () => {
  await api.stop();
  await sim.close();
  await db.drop();
});

async function send(client: ApiClient, from: string, to: string, sendAt?: Date): Promise<string> {
  const res = await client.post('/v1/messages', {
    from,
    to,
    body: 'Fair is fair',
    ...(sendAt ? { send_at: sendAt.toISOString() } : {}),
  });
  expect(res.status).toBe(201);
  return res.json.id;
}

/** Runs one worker with one slot until `done` says so; what it said. */
async function oneSlot<T>(done: () => Promise<T | false>): Promise<T> {
  const worker = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['worker'],
    env: { ...sim.carrierEnv(), HANDSET_WORKER_CONCURRENCY: '1' },
  });
  try {
    return await eventually(done, 30_000);
  } finally {
    await worker.stop();
  }
}

/** Runs one worker with one slot until every given message went to the carrier; their ids in that order. */
function dispatchInOrder(ids: string[]): Promise<string[]> {
  return oneSlot(async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id FROM messages WHERE id = ANY($1::text[]) AND status <> 'queued' AND status <> 'scheduled'
          ORDER BY dispatched_at`,
      [ids],
    );
    return rows.length === ids.length && rows.map((r) => r.id);
  });
}

describe('fair dispatch between accounts', () => {
  it("another account's message goes out next, not behind a campaign queued before it", async () => {
    const campaign: string[] = [];
    for (let i = 0; i < CAMPAIGN; i++) campaign.push(await send(acme, '+13125550001', RECIPIENT(i)));
    const alone = await send(globex, '+13125550002', RECIPIENT(0));

    const order = await dispatchInOrder([...campaign, alone]);
    expect(order.indexOf(alone)).toBeLessThanOrEqual(1);
    // An account's own messages still go out in the order they were created.
    expect(order.filter((id) => id !== alone)).toEqual(campaign);
  });

  it("another account's message sent while a campaign fills the dispatcher's hand reaches the carrier next, not behind the hand", async () => {
    // One request at a time of a tenth of a second: the campaign's 60 are claimed at once and wait in the
    // dispatcher's hand for their turn; Globex's message joins while they do.
    sim.setBehaviour({ sendLatencyMs: 100 });
    const requests = () =>
      sim.requests
        .filter((r) => r.method === 'POST' && r.path === '/v2/messages')
        .map((r) => (r.body as { from: string }).from);
    const before = requests().length;
    const campaign: string[] = [];
    for (let i = 0; i < CAMPAIGN; i++) campaign.push(await send(acme, '+13125550001', RECIPIENT(i)));
    const worker = await startTestPlatform({
      databaseUrl: db.url,
      roles: ['worker'],
      env: { ...sim.carrierEnv(), HANDSET_DISPATCH_CONCURRENCY: '1' },
    });
    try {
      await eventually(async () => requests().length - before >= 3, 30_000, 10);
      const sentBefore = requests().length - before;
      await send(globex, '+13125550002', RECIPIENT(3));
      const { at } = await eventually(async () => {
        const i = requests().slice(before).indexOf('+13125550002');
        return i >= 0 && { at: i };
      }, 30_000);
      // Ahead of it only the campaign's requests already made or under way when it was sent (and one
      // taken in the moment it took to claim it); behind it the rest of the hand.
      expect(at - sentBefore).toBeLessThanOrEqual(2);
      await eventually(
        async () =>
          (await db.pool.query(`SELECT 1 FROM messages WHERE id = ANY($1) AND status = 'queued'`, [campaign]))
            .rowCount === 0,
        30_000,
      );
    } finally {
      sim.setBehaviour({ sendLatencyMs: 0 });
      await worker.stop();
    }
  });

  it("a scheduled campaign falling due does not hold up another account's message sent after it", async () => {
    const dueAt = new Date(Date.now() + 1_500);
    const campaign: string[] = [];
    for (let i = 0; i < CAMPAIGN; i++) campaign.push(await send(acme, '+13125550001', RECIPIENT(i), dueAt));
    await new Promise((r) => setTimeout(r, Math.max(0, dueAt.getTime() - Date.now()) + 100));
    const alone = await send(globex, '+13125550002', RECIPIENT(1));

    const order = await dispatchInOrder([...campaign, alone]);
    expect(order.indexOf(alone)).toBeLessThanOrEqual(1);
    expect(order.filter((id) => id !== alone)).toEqual(campaign);
  });

  it("another account's call is dialed before a campaign queued ahead of it is sent", async () => {
    const campaign: string[] = [];
    for (let i = 0; i < CAMPAIGN; i++) campaign.push(await send(acme, '+13125550001', RECIPIENT(i)));
    const placed = await globex.post('/v1/calls', { from: '+13125550002', to: [RECIPIENT(2)], ring_timeout_secs: 30 });
    expect(placed.status).toBe(201);

    // Sent before the dial, of the campaign, once the worker has done both.
    const ahead = await oneSlot(async () => {
      const { rows } = await db.pool.query<{ ahead: number | null }>(
        `SELECT (SELECT count(*)::int FROM messages m WHERE m.id = ANY($2::text[]) AND m.dispatched_at < l.dialed_at) AS ahead
           FROM call_legs l
          WHERE l.call_id = $1 AND l.dialed_at IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = ANY($2::text[]) AND m.status = 'queued')`,
        [placed.json.id, campaign],
      );
      return rows[0] ? { n: rows[0].ahead } : false;
    });
    expect(ahead.n).toBeLessThanOrEqual(1);
  });
});
