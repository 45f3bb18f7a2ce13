// No noisy neighbours: one account's endpoints that accept connections and never
// answer must not slow another account's messages or webhooks, nor carrier
// events. Each figure is compared with the same measurement taken in the same run
// without the noise (never with a fixed bound).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { type Receiver, startReceiver } from '../support/receiver.js';

const A_NUMBER = '+13125550401';
const C_NUMBER = '+13125550402';
const DELIVERED = '+15555550100'; // the simulator's persona that gets every message delivered

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
const receivers: Receiver[] = [];

async function customer(name: string, number: string) {
  const client = await createAccount(db.pool, platform.apiUrl!, name);
  expect((await client.post('/v1/phone_numbers', { number })).status).toBe(201);
  return client;
}

async function endpointFor(client: ApiClient, answer: Receiver['answer'] = () => ({ status: 200 })) {
  const receiver = await startReceiver();
  receivers.push(receiver);
  receiver.answer = answer;
  const res = await client.post('/v1/webhook_endpoints', { url: receiver.url });
  expect(res.status).toBe(201);
  receiver.secrets = [res.json.secret];
  return receiver;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** How long A's message takes to reach `sent`, and its message.sent webhook to reach A's endpoint. */
async function measure(a: ApiClient, rx: Receiver, samples: number) {
  const sent: number[] = [];
  const hooked: number[] = [];
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now();
    const res = await a.post('/v1/messages', { from: A_NUMBER, to: DELIVERED, body: `hello ${i}` });
    expect(res.status).toBe(201);
    const id = res.json.id as string;
    await eventually(async () => (await a.get(`/v1/messages/${id}`)).json.status !== 'queued', 60_000, 10);
    sent.push(performance.now() - t0);
    await eventually(async () => rx.events().some((e) => e.type === 'message.sent' && e.data['id'] === id), 60_000, 10);
    hooked.push(performance.now() - t0);
  }
  return { sent: median(sent), webhook: median(hooked) };
}

describe('noisy neighbour', () => {
  beforeAll(async () => {
    db = await createTestDatabase();
    sim = await startSimulator({ webhookUrl: null, seed: 'fairness' });
    platform = await startTestPlatform({
      databaseUrl: db.url,
      roles: ['ingest', 'api', 'worker'],
      env: { ...sim.carrierEnv() },
    });
    sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  });
  afterAll(async () => {
    for (const r of receivers) await r.close();
    await platform.stop();
    await sim.close();
    await db.drop();
  });

  it('another account’s 12 endpoints that never answer, and its 10 messages, leave A’s send and A’s webhook within 2× of their time without them', async () => {
    const a = await customer('A', A_NUMBER);
    const aRx = await endpointFor(a);
    const quiet = await measure(a, aRx, 5);

    const c = await customer('C', C_NUMBER);
    const hang = await startReceiver();
    receivers.push(hang);
    hang.answer = () => ({ status: 200, hang: true });
    for (let i = 0; i < 12; i++) {
      expect((await c.post('/v1/webhook_endpoints', { url: `${hang.url}/${i}` })).status).toBe(201);
    }
    for (let i = 0; i < 10; i++) {
      expect((await c.post('/v1/messages', { from: C_NUMBER, to: DELIVERED, body: `noise ${i}` })).status).toBe(201);
    }
    // C's attempts are hanging before A is measured again.
    await eventually(async () => hang.received.length >= 4, 30_000);
    const noisy = await measure(a, aRx, 5);
    const held = hang.received.length;

    expect(noisy.sent).toBeLessThanOrEqual(2 * quiet.sent);
    expect(noisy.webhook).toBeLessThanOrEqual(2 * quiet.webhook);
    // C got some capacity (its share), not all of it: it was hanging the whole time A was measured.
    expect(held).toBeGreaterThanOrEqual(4);
    expect(held).toBeLessThan(12 * 20);
  });
});

describe('delivery capacity apart', () => {
  let db2: TestDatabase;
  let sim2: Simulator;
  let platform2: Platform;
  beforeAll(async () => {
    db2 = await createTestDatabase();
    sim2 = await startSimulator({ webhookUrl: null, seed: 'capacity' });
    platform2 = await startTestPlatform({
      databaseUrl: db2.url,
      roles: ['ingest', 'api', 'worker'],
      env: { ...sim2.carrierEnv(), HANDSET_DELIVERY_CONCURRENCY: '2', HANDSET_DELIVERY_PER_ACCOUNT: '2' },
    });
    sim2.setWebhookUrl(`${platform2.ingestUrl}/webhooks/telnyx`);
  });
  afterAll(async () => {
    for (const r of receivers) await r.close();
    await platform2.stop();
    await sim2.close();
    await db2.drop();
  });

  it('a carrier event is processed while every delivery slot hangs on another account’s endpoints', async () => {
    const c = await createAccount(db2.pool, platform2.apiUrl!, 'C');
    expect((await c.post('/v1/phone_numbers', { number: C_NUMBER })).status).toBe(201);
    const hang = await startReceiver();
    receivers.push(hang);
    hang.answer = () => ({ status: 200, hang: true });
    for (let i = 0; i < 2; i++) {
      expect((await c.post('/v1/webhook_endpoints', { url: `${hang.url}/${i}` })).status).toBe(201);
    }
    for (let i = 0; i < 3; i++) await c.post('/v1/messages', { from: C_NUMBER, to: DELIVERED, body: `noise ${i}` });
    await eventually(async () => hang.received.length >= 2, 30_000);

    const a = await createAccount(db2.pool, platform2.apiUrl!, 'A');
    expect((await a.post('/v1/phone_numbers', { number: A_NUMBER })).status).toBe(201);
    sim2.injectInboundSms({ from: '+14155550777', to: A_NUMBER, text: 'still heard' });
    const got = await eventually(async () => {
      const list = (await a.get('/v1/messages?direction=inbound')).json.data as { body: string }[];
      return list.find((m) => m.body === 'still heard');
    }, 20_000);
    expect(got).toBeTruthy();
    // Both delivery slots were still held by the hanging endpoints the whole time.
    expect(hang.received.length).toBe(2);
  });
});
