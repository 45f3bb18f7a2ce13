// The API the console needed and the public API lacked: what the ledger billed
// for one message or call, an endpoint's recent attempts (its health), and usage
// per hour/day/week/month. Real pipeline: the simulator as the carrier, a
// receiver as the customer's endpoint; each addition is isolated per account.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bill } from '../../src/billing/usage.sql.js';
import { withTx } from '../../src/db/tx.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

const ACME_NUMBER = '+13125550301';
const OTHER_NUMBER = '+13125550302';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;
let other: ApiClient;
let receiver: Receiver;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'console-api' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: { ...sim.carrierEnv(), HANDSET_DELIVERY_RETRY_SCHEDULE: '50ms,50ms,50ms' },
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  other = await createAccount(db.pool, platform.apiUrl!, 'Other');
  expect((await acme.post('/v1/phone_numbers', { number: ACME_NUMBER })).status).toBe(201);
  expect((await other.post('/v1/phone_numbers', { number: OTHER_NUMBER })).status).toBe(201);
  receiver = await startReceiver();
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await receiver.close();
  await db.drop();
});

async function deliveredMessage(client: ApiClient, from: string, body: string): Promise<string> {
  const res = await client.post('/v1/messages', { from, to: '+15555550100', body });
  expect(res.status).toBe(201);
  await eventually(async () => (await client.get(`/v1/messages/${res.json.id}`)).json.status === 'delivered', 30_000);
  return res.json.id;
}

describe('GET /v1/messages/{id}/usage_records and /v1/calls/{id}/usage_records', () => {
  it('a sent message shows the one record the ledger wrote for it: its segments, once', async () => {
    const body = 'x'.repeat(200); // two GSM-7 segments
    const id = await deliveredMessage(acme, ACME_NUMBER, body);
    const res = await acme.get(`/v1/messages/${id}/usage_records`);
    expect(res.status).toBe(200);
    expect(res.json.has_more).toBe(false);
    expect(res.json.data).toEqual([
      {
        id: expect.stringMatching(/^usg_/),
        kind: 'sms_segment_outbound',
        quantity: 2,
        source_id: id,
        tenant_id: null,
        occurred_at: expect.any(String),
      },
    ]);
  });

  it('a message nothing was billed for yet answers an empty list, not 404', async () => {
    const sendAt = new Date(Date.now() + 3_600_000).toISOString();
    const scheduled = await acme.post('/v1/messages', {
      from: ACME_NUMBER,
      to: '+15555550100',
      body: 'later',
      send_at: sendAt,
    });
    expect(await acme.get(`/v1/messages/${scheduled.json.id}/usage_records`)).toMatchObject({
      status: 200,
      json: { data: [], has_more: false },
    });
  });

  it('a completed call shows its minutes', async () => {
    const call = await acme.post('/v1/calls', { from: ACME_NUMBER, to: ['+15555550100'], ring_timeout_secs: 5 });
    expect(call.status).toBe(201);
    await eventually(async () => (await acme.get(`/v1/calls/${call.json.id}`)).json.status === 'completed', 30_000);
    const res = await acme.get(`/v1/calls/${call.json.id}/usage_records`);
    expect(res.json.data).toEqual([
      expect.objectContaining({ kind: 'call_minute', quantity: 1, source_id: call.json.id }),
    ]);
  });

  it("another account's message or call is 404, as is a message id on the calls route; a 65-character id is 422", async () => {
    const theirs = await deliveredMessage(other, OTHER_NUMBER, 'not yours');
    const theirCall = await other.post('/v1/calls', { from: OTHER_NUMBER, to: ['+15555550100'] });
    for (const path of [
      `/v1/messages/${theirs}/usage_records`,
      `/v1/calls/${theirCall.json.id}/usage_records`,
      `/v1/calls/${theirs}/usage_records`,
    ]) {
      expect(await acme.get(path)).toMatchObject({ status: 404, json: { code: 'resource_not_found' } });
    }
    expect((await other.get(`/v1/messages/${theirs}/usage_records`)).json.data).toHaveLength(1);
    expect(await acme.get(`/v1/messages/${'m'.repeat(65)}/usage_records`)).toMatchObject({
      status: 422,
      json: { param: 'id' },
    });
  });
});

describe('GET /v1/webhook_endpoints/{id}/attempts', () => {
  it("lists the endpoint's attempts newest first with outcome and latency, and pages with limit and starting_after", async () => {
    receiver.answer = (n) => (n === 0 ? { status: 500, body: 'boom' } : { status: 200, body: 'ok' });
    const ep = await acme.post('/v1/webhook_endpoints', { url: receiver.url, event_types: ['message.sent'] });
    expect(ep.status).toBe(201);
    await deliveredMessage(acme, ACME_NUMBER, 'health check');
    // the first attempt fails, its retry 50 ms later succeeds
    const all = await eventually(async () => {
      const res = await acme.get(`/v1/webhook_endpoints/${ep.json.id}/attempts`);
      return res.json.data.length === 2 && res.json;
    });
    expect(all.has_more).toBe(false);
    const [newest, oldest] = all.data;
    expect(oldest).toMatchObject({
      attempt: 1,
      event_type: 'message.sent',
      response_status: 500,
      response_excerpt: 'boom',
      succeeded: false,
      trigger: 'scheduled',
    });
    expect(newest).toMatchObject({
      attempt: 2,
      response_status: 200,
      succeeded: true,
      delivery_id: oldest.delivery_id,
      event_id: oldest.event_id,
    });
    expect(newest.id > oldest.id).toBe(true);
    expect(Number.isInteger(newest.duration_ms) && newest.duration_ms >= 0).toBe(true);

    const first = await acme.get(`/v1/webhook_endpoints/${ep.json.id}/attempts?limit=1`);
    expect(first.json).toMatchObject({ data: [{ id: newest.id }], has_more: true });
    const second = await acme.get(`/v1/webhook_endpoints/${ep.json.id}/attempts?limit=1&starting_after=${newest.id}`);
    expect(second.json).toMatchObject({ data: [{ id: oldest.id }], has_more: false });
    await acme.delete(`/v1/webhook_endpoints/${ep.json.id}`);
  });

  it("another account's endpoint is 404; a deleted one is 404; limit 0 or 101 is 422", async () => {
    const theirs = await other.post('/v1/webhook_endpoints', { url: receiver.url });
    expect(await acme.get(`/v1/webhook_endpoints/${theirs.json.id}/attempts`)).toMatchObject({
      status: 404,
      json: { code: 'resource_not_found' },
    });
    expect((await other.get(`/v1/webhook_endpoints/${theirs.json.id}/attempts`)).status).toBe(200);
    const mine = await acme.post('/v1/webhook_endpoints', { url: receiver.url });
    for (const limit of [0, 101]) {
      expect(await acme.get(`/v1/webhook_endpoints/${mine.json.id}/attempts?limit=${limit}`)).toMatchObject({
        status: 422,
        json: { param: 'limit' },
      });
    }
    await acme.delete(`/v1/webhook_endpoints/${mine.json.id}`);
    expect((await acme.get(`/v1/webhook_endpoints/${mine.json.id}/attempts`)).status).toBe(404);
    await other.delete(`/v1/webhook_endpoints/${theirs.json.id}`);
  });
});

describe('GET /v1/usage?interval=', () => {
  it('sums per UTC day and kind, oldest first, leaving out days without usage, and keeps the period totals', async () => {
    const fresh = await createAccount(db.pool, platform.apiUrl!, 'Ledger');
    const at = (iso: string) => new Date(iso);
    await withTx(db.pool, async (tx) => {
      const rows = [
        ['sms_segment_outbound', 2, '2031-03-01T00:00:00Z'],
        ['sms_segment_outbound', 3, '2031-03-01T23:59:59Z'],
        ['call_minute', 4, '2031-03-01T12:00:00Z'],
        ['sms_segment_outbound', 1, '2031-03-03T08:00:00Z'],
        ['sms_segment_outbound', 9, '2031-03-04T00:00:00Z'], // at `to`: outside
      ] as const;
      for (const [kind, quantity, occurred] of rows) {
        await bill(tx, {
          accountId: fresh.accountId,
          tenantId: null,
          kind,
          quantity,
          sourceId: 'msg_test',
          occurredAt: at(occurred),
        });
      }
    });
    const res = await fresh.get('/v1/usage?from=2031-03-01T00:00:00Z&to=2031-03-04T00:00:00Z&interval=day');
    expect(res.status).toBe(200);
    expect(res.json).toEqual({
      from: '2031-03-01T00:00:00.000Z',
      to: '2031-03-04T00:00:00.000Z',
      interval: 'day',
      data: [
        { kind: 'call_minute', quantity: 4 },
        { kind: 'sms_segment_outbound', quantity: 6 },
      ],
      buckets: [
        {
          start: '2031-03-01T00:00:00.000Z',
          data: [
            { kind: 'call_minute', quantity: 4 },
            { kind: 'sms_segment_outbound', quantity: 5 },
          ],
        },
        { start: '2031-03-03T00:00:00.000Z', data: [{ kind: 'sms_segment_outbound', quantity: 1 }] },
      ],
    });
    const hourly = await fresh.get('/v1/usage?from=2031-03-01T00:00:00Z&to=2031-03-02T00:00:00Z&interval=hour');
    expect(hourly.json.buckets.map((b: { start: string }) => b.start)).toEqual([
      '2031-03-01T00:00:00.000Z',
      '2031-03-01T12:00:00.000Z',
      '2031-03-01T23:00:00.000Z',
    ]);
    const monthly = await fresh.get('/v1/usage?from=2031-01-01T00:00:00Z&to=2032-01-01T00:00:00Z&interval=month');
    expect(monthly.json.buckets).toEqual([
      {
        start: '2031-03-01T00:00:00.000Z',
        data: [
          { kind: 'call_minute', quantity: 4 },
          { kind: 'sms_segment_outbound', quantity: 15 },
        ],
      },
    ]);
    // weeks start on Monday: 2031-03-01 is a Saturday, 2031-03-03 a Monday
    const weekly = await fresh.get('/v1/usage?from=2031-03-01T00:00:00Z&to=2031-03-04T00:00:00Z&interval=week');
    expect(weekly.json.buckets.map((b: { start: string }) => b.start)).toEqual([
      '2031-02-24T00:00:00.000Z',
      '2031-03-03T00:00:00.000Z',
    ]);
    // another account's ledger is never counted
    expect(
      (await acme.get('/v1/usage?from=2031-01-01T00:00:00Z&to=2032-01-01T00:00:00Z&interval=month')).json,
    ).toMatchObject({ data: [], buckets: [] });
  });

  it('without interval the answer is as before; an unknown interval or an empty period is 422 and names the parameter', async () => {
    const plain = await acme.get('/v1/usage?from=2031-01-01T00:00:00Z&to=2031-02-01T00:00:00Z');
    expect(plain.json).toEqual({ from: '2031-01-01T00:00:00.000Z', to: '2031-02-01T00:00:00.000Z', data: [] });
    expect(await acme.get('/v1/usage?interval=fortnight')).toMatchObject({ status: 422, json: { param: 'interval' } });
    expect(await acme.get('/v1/usage?interval=day&from=2031-02-01T00:00:00Z&to=2031-01-01T00:00:00Z')).toMatchObject({
      status: 422,
      json: { code: 'invalid_period', param: 'to' },
    });
  });

  it('each addition is documented in the OpenAPI document', async () => {
    const doc = (await acme.get('/openapi.json')).json;
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/v1/messages/{id}/usage_records',
        '/v1/calls/{id}/usage_records',
        '/v1/webhook_endpoints/{id}/attempts',
      ]),
    );
    const usage = doc.paths['/v1/usage'].get.parameters.find((p: { name: string }) => p.name === 'interval');
    expect(usage.schema).toEqual({ $ref: '#/components/schemas/UsageInterval' });
    expect(doc.components.schemas.UsageInterval.enum).toEqual(['hour', 'day', 'week', 'month']);
  });
});
