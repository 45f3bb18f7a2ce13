// A second carrier through the unchanged core: "relay" (test/support/relay-carrier.ts)
// speaks its own wire format and signs with HMAC instead of Ed25519. Handset is
// given its adapter and nothing else; its numbers, sends, receipts, inbound texts,
// customer events and reconciliation go through the same ingest, workers, guards
// and outbox as Telnyx's, and the Telnyx side of the deployment is not involved.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcilePass } from '../../src/reconcile/reconcile.js';
import type { Platform } from '../../src/platform.js';
import { createLogger } from '../../src/telemetry/log.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { telnyxKeys, postWebhook, envelope } from '../support/carrier.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';
import { relayAdapter, signRelay, startRelay, type Relay } from '../support/relay-carrier.js';

const SECRET = 'relay-test-secret';
const OURS = '+13125550177';
const THEIRS = '+13125550188';
const UNREACHABLE = '+13125550199';

let db: TestDatabase;
let relay: Relay;
let platform: Platform;
let receiver: Receiver;
let acme: ApiClient;
const adapter = () => relayAdapter({ secret: SECRET, apiUrl: relay.url });

beforeAll(async () => {
  db = await createTestDatabase();
  relay = await startRelay({ secret: SECRET });
  // No TELNYX_PUBLIC_KEY: ingest serves the carrier it can verify, relay.
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    carriers: [adapter()],
  });
  relay.webhookUrl = `${platform.ingestUrl}/webhooks/relay`;
  acme = await createAccount(db.pool, platform.apiUrl!, 'Relay customer');
  receiver = await startReceiver();
  const ep = await acme.post('/v1/webhook_endpoints', { url: receiver.url });
  expect(ep.status).toBe(201);
  receiver.secrets = [ep.json.secret];
  const n = await acme.post('/v1/phone_numbers', { number: OURS, carrier: 'relay' });
  expect(n.status).toBe(201);
  expect(n.json.carrier).toBe('relay');
});
afterAll(async () => {
  await platform.stop();
  await relay.close();
  await receiver.close();
  await db.drop();
});

const delivered = (type: string, id: string) =>
  receiver.events().filter((e) => e.type === type && e.data['id'] === id).length;
const send = async (to: string, body: string) => {
  const res = await acme.post('/v1/messages', { from: OURS, to, body });
  expect(res.status).toBe(201);
  return res.json.id as string;
};
const statusOf = async (id: string) => (await acme.get(`/v1/messages/${id}`)).json.status as string;

describe('a second carrier', () => {
  it('an SMS from a relay number goes out through relay; its receipt, sent twice under two ids, delivers it once, bills it once, tells the customer once', async () => {
    relay.statusWebhooks = 'twice_new_id';
    const id = await send(THEIRS, 'hello over relay');
    await eventually(async () => (await statusOf(id)) === 'delivered');
    await eventually(async () => delivered('message.delivered', id) === 1);
    // Both status webhooks were stored (two event ids), and the second changed nothing.
    await eventually(async () => relay.posted.filter((p) => p.body.includes('sms.status')).length >= 2);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as { effect: string }[];
    // The two copies race through the workers; whichever is processed first applies, the other is refused
    // (history is in the carrier's time order, and each copy carries its own moment).
    expect(history.map((h) => h.effect).sort()).toEqual(['applied', 'applied', 'applied', 'refused']);
    expect(history.slice(0, 2).map((h) => h.effect)).toEqual(['applied', 'applied']);
    expect(relay.sends.filter((s) => s.key === id)).toHaveLength(1);
    expect(await count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [id])).toBe(1);
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier = 'relay'`)).toBeGreaterThanOrEqual(2);
    expect(delivered('message.sent', id)).toBe(1);
    // The events carry the message's sequence, so a receiver can order them however they arrive.
    const seq = (type: string) =>
      receiver.events().find((e) => e.type === type && e.data['id'] === id)!.data['sequence'] as number;
    expect(Number.isInteger(seq('message.sent'))).toBe(true);
    expect(seq('message.delivered')).toBeGreaterThan(seq('message.sent'));
    expect((await acme.get(`/v1/messages/${id}`)).json.sequence).toBe(seq('message.delivered'));
    relay.statusWebhooks = 'once';
  });

  it("billing follows the carrier's part count: a text relay splits in 2 parts (its own rule) is billed 2, our estimate of 3 kept beside it", async () => {
    const body = 'a'.repeat(320);
    const id = await send(THEIRS, body);
    await eventually(async () => (await statusOf(id)) === 'delivered');
    const m = (await acme.get(`/v1/messages/${id}`)).json;
    expect(m).toMatchObject({ segments: 3, carrier_segments: 2 });
    const { rows } = await db.pool.query('SELECT kind, quantity FROM usage_records WHERE source_id = $1', [id]);
    expect(rows).toEqual([{ kind: 'sms_segment_outbound', quantity: 2 }]);
  });

  it('an undeliverable relay text fails with relay’s reason, bills its send, and says message.failed once', async () => {
    relay.unreachable.add(UNREACHABLE);
    const id = await send(UNREACHABLE, 'nobody home');
    await eventually(async () => (await statusOf(id)) === 'failed');
    await eventually(async () => delivered('message.failed', id) === 1);
    expect(delivered('message.delivered', id)).toBe(0);
  });

  it('an inbound relay text, retried and re-sent under a new event id, is one message and one message.received', async () => {
    const body = await relay.inbound(THEIRS, OURS, 'hi from a relay phone', { ref: 'in-fixed-1', id: 'evt-in-1' });
    expect(await relay.repost(body)).toBe(200);
    await relay.inbound(THEIRS, OURS, 'hi from a relay phone', { ref: 'in-fixed-1', id: 'evt-in-2' });
    const m = await eventually(async () => {
      const { rows } = await db.pool.query(`SELECT id, carrier FROM messages WHERE carrier_message_id = 'in-fixed-1'`);
      return rows[0] as { id: string; carrier: string } | undefined;
    });
    expect(m.carrier).toBe('relay');
    await eventually(async () => delivered('message.received', m.id) === 1);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    expect(await count(db.pool, `SELECT * FROM messages WHERE carrier_message_id = 'in-fixed-1'`)).toBe(1);
    expect(delivered('message.received', m.id)).toBe(1);
    // Stored twice (two event ids), not three times (the retry was the same id).
    expect(
      await count(db.pool, `SELECT * FROM carrier_events WHERE carrier = 'relay' AND subject = 'in-fixed-1'`),
    ).toBe(2);
  });

  it('when relay never sends the receipt, reconciliation asks relay and takes its word', async () => {
    relay.statusWebhooks = 'never';
    const id = await send(THEIRS, 'a receipt that never comes');
    await eventually(async () => (await statusOf(id)) === 'sent');
    await eventually(async () =>
      [...relay.texts.values()].some((t) => t.status === 'delivered' && t.text.includes('never comes')),
    );
    const tally = await reconcilePass({
      pool: db.pool,
      carriers: new Map([['relay', adapter()]]),
      log: createLogger('silent'),
      intervalMs: 60_000,
      afterMs: 60_000,
      messageAfterMs: 60_000,
      now: () => new Date(Date.now() + 3_600_000),
    });
    expect(tally.applied).toBeGreaterThanOrEqual(1);
    await eventually(async () => (await statusOf(id)) === 'delivered');
    const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as { source: string }[];
    expect(history.at(-1)!.source).toBe('reconciliation');
    await eventually(async () => delivered('message.delivered', id) === 1);
    relay.statusWebhooks = 'once';
  });

  it('a relay webhook unsigned, signed with another secret, or signed the Telnyx way is refused 401 and stores nothing', async () => {
    const before = await count(db.pool, 'SELECT * FROM carrier_events');
    const body = JSON.stringify({ id: 'evt-forged', type: 'sms.inbound', at: new Date().toISOString(), sms: {} });
    const post = (headers: Record<string, string>) =>
      fetch(relay.webhookUrl, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    const now = Math.floor(Date.now() / 1000);
    expect((await post({})).status).toBe(401);
    expect((await post({ 'relay-signature': signRelay('another-secret', now, body) })).status).toBe(401);
    expect((await postWebhook(relay.webhookUrl, telnyxKeys(), body)).status).toBe(401);
    expect((await post({ 'relay-signature': signRelay(SECRET, now - 3600, body) })).status).toBe(401);
    expect(await count(db.pool, 'SELECT * FROM carrier_events')).toBe(before);
  });

  it('a deployment without a Telnyx public key has no Telnyx webhook door', async () => {
    const res = await postWebhook(`${platform.ingestUrl}/webhooks/telnyx`, telnyxKeys(), envelope('evt-telnyx'));
    expect(res.status).toBe(404);
  });

  it('a call from a relay number is refused: relay carries no calls, and nothing is dialed or stored', async () => {
    const res = await acme.post('/v1/calls', { from: OURS, to: [THEIRS] });
    expect(res.status).toBe(422);
    expect(res.json.code).toBe('voice_not_supported');
    expect(await count(db.pool, 'SELECT * FROM calls')).toBe(0);
  });

  it('a number is unique at its carrier: the same number at relay twice is a conflict; an unknown carrier is named', async () => {
    expect((await acme.post('/v1/phone_numbers', { number: OURS, carrier: 'relay' })).status).toBe(409);
    const unknown = await acme.post('/v1/phone_numbers', { number: '+13125550166', carrier: 'nope' });
    expect(unknown.status).toBe(422);
    expect(unknown.json.code).toBe('carrier_not_configured');
    // Two carriers are configured here (telnyx and relay): a number must say which.
    const unnamed = await acme.post('/v1/phone_numbers', { number: '+13125550166' });
    expect(unnamed.status).toBe(422);
    expect(unnamed.json.code).toBe('carrier_required');
    expect(await count(db.pool, `SELECT * FROM phone_numbers WHERE number = '+13125550166'`)).toBe(0);
  });
});
