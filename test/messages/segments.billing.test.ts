// Billing follows the carrier's split: through the real pipeline (API, worker, the
// simulated carrier, signed webhooks into ingest), a text with an escape or a
// surrogate pair at a part boundary is stored and billed as the parts it really takes.

import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, telnyxWebhook, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const OUR_NUMBER = '+13125550001';
const BODIES = [
  ['an escape', 'a'.repeat(152) + '{' + 'a'.repeat(152), 'GSM-7'],
  ['a surrogate pair', 'ж'.repeat(66) + '😀' + 'ж'.repeat(66), 'UCS-2'],
] as const;

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'segments-billing' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: sim.carrierEnv(),
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  expect((await acme.post('/v1/phone_numbers', { number: OUR_NUMBER })).status).toBe(201);
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const billed = (messageId: string) =>
  db.pool
    .query(`SELECT kind, sum(quantity)::int AS quantity FROM usage_records WHERE source_id = $1 GROUP BY kind`, [
      messageId,
    ])
    .then((r) => r.rows);

describe('segments billed', () => {
  it.each(BODIES)('%s at a part boundary: an outbound SMS is 3 segments, billed 3', async (_, body, encoding) => {
    const res = await acme.post('/v1/messages', { from: OUR_NUMBER, to: '+15555550100', body });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({ encoding, segments: 3 });
    const sent = await eventually(async () => {
      const m = (await acme.get(`/v1/messages/${res.json.id}`)).json;
      return m.status !== 'queued' && m;
    });
    expect(sent).toMatchObject({ status: expect.stringMatching(/^(sent|delivered)$/), segments: 3 });
    expect(await billed(res.json.id)).toEqual([{ kind: 'sms_segment_outbound', quantity: 3 }]);
  });

  it.each(BODIES)('%s at a part boundary: an inbound SMS is 3 segments, billed 3', async (_, text, encoding) => {
    const carrierId = randomUUID();
    const webhook = telnyxWebhook.messageReceived({ messageId: carrierId, from: '+14155550123', to: OUR_NUMBER, text });
    expect(await sim.deliver(webhook)).toBe(200);
    const m = await eventually(async () => {
      const { rows } = await db.pool.query(
        `SELECT id, encoding, segments FROM messages WHERE carrier_message_id = $1`,
        [carrierId],
      );
      return rows[0];
    });
    expect(m).toMatchObject({ encoding, segments: 3 });
    expect(await billed(m.id)).toEqual([{ kind: 'sms_segment_inbound', quantity: 3 }]);
  });
});
