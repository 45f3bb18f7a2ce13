// Twilio as Handset's second carrier, through the unchanged core: a Twilio
// number's messages go out through Twilio's REST API, its status callbacks (no
// event id, no time, signed over the URL) and inbound messages come in through
// /webhooks/twilio, are stored once under ids derived from the facts, and are
// applied by the same handlers and guards as Telnyx's. The carrier misbehaves
// like Twilio: callbacks repeated, late, out of order and before the create was
// answered; a send refused with 21610; an answer lost after the message was sent.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import twilio from 'twilio';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { carriers } from '../../src/carrier/registry.js';
import { reconcilePass } from '../../src/reconcile/reconcile.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createLogger } from '../../src/telemetry/log.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { startTwoCarriers, type TwoCarriers } from '../support/carriers.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform, testConfig } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

const OURS = '+13125550301';
const DELIVERS = '+15555550100';
const UNDELIVERED = '+15555550101';

let db: TestDatabase;
let c: TwoCarriers;
let receiver: Receiver;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  c = await startTwoCarriers({ databaseUrl: db.url, twilio: { seed: 'twilio-e2e' } });
  acme = await createAccount(db.pool, c.platform.apiUrl!, 'Twilio customer');
  receiver = await startReceiver();
  const ep = await acme.post('/v1/webhook_endpoints', { url: receiver.url });
  receiver.secrets = [ep.json.secret];
  const n = await acme.post('/v1/phone_numbers', { number: OURS, carrier: 'twilio' });
  expect(n.status).toBe(201);
  expect(n.json.carrier).toBe('twilio');
});
afterAll(async () => {
  await c.close();
  await receiver.close();
  await db.drop();
});

const send = async (to: string, body: string, extra: object = {}) => {
  const res = await acme.post('/v1/messages', { from: OURS, to, body, ...extra });
  expect(res.status).toBe(201);
  return res.json.id as string;
};
const message = async (id: string) => (await acme.get(`/v1/messages/${id}`)).json;
const events = (id: string, type: string) =>
  count(db.pool, 'SELECT * FROM outbound_events WHERE subject_id = $1 AND type = $2', [id, type]);
const bills = (id: string) => count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [id]);
const settled = () =>
  eventually(
    async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    20_000,
  );
const ingest = () => `${c.platform.ingestUrl}/webhooks/twilio`;

/** Posts a form to ingest signed by the official SDK over `url` (what Twilio would have called). */
async function post(params: Record<string, string>, o: { url?: string; signedUrl?: string; token?: string } = {}) {
  const url = o.url ?? ingest();
  const signature = twilio.getExpectedTwilioSignature(o.token ?? c.twilio.authToken, o.signedUrl ?? url, params);
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': signature },
    body: new URLSearchParams(params).toString(),
  });
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
}

describe('Twilio messaging', () => {
  it('callbacks ×3, out of order, before the create returned: one terminal status, one event per transition, billed once', async () => {
    c.twilio.setBehaviour({ earlyReceiptRate: 1, duplicateRate: 1 });
    const id = await send(DELIVERS, 'hello over twilio');
    await eventually(async () => (await message(id)).status === 'delivered');
    await c.twilio.idle();
    c.twilio.setBehaviour({ earlyReceiptRate: 0, duplicateRate: 0 });
    const m = await message(id);
    expect(m.carrier).toBe('twilio');
    expect(m.carrier_message_id).toMatch(/^SM[0-9a-f]{32}$/);
    // Twilio sent each callback twice before its create was answered; a third time now, newest fact first.
    const told = c.twilio.callbacks.filter((x) => x.sid === m.carrier_message_id);
    expect(told.filter((x) => x.copy === 'duplicate').length).toBeGreaterThanOrEqual(2);
    const callback = `${ingest()}?message=${id}`;
    for (const status of ['delivered', 'sent']) {
      const params = {
        SmsSid: m.carrier_message_id,
        SmsStatus: status,
        MessageStatus: status,
        To: DELIVERS,
        MessageSid: m.carrier_message_id,
        AccountSid: c.twilio.accountSid,
        From: OURS,
        ApiVersion: '2010-04-01',
      };
      expect((await post(params, { url: callback })).status).toBe(200);
    }
    await settled();
    expect((await message(id)).status).toBe('delivered');
    // Two facts (sent, delivered), each stored once however often it came.
    expect(
      await count(db.pool, `SELECT * FROM carrier_events WHERE carrier = 'twilio' AND subject = $1`, [
        m.carrier_message_id,
      ]),
    ).toBe(2);
    expect(await events(id, 'message.sent')).toBe(1);
    expect(await events(id, 'message.delivered')).toBe(1);
    expect(await bills(id)).toBe(1);
    expect(c.twilio.acceptedFor(id)).toBe(1);
    await eventually(async () => receiver.events().filter((e) => e.data['id'] === id).length === 2);
    const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as {
      carrier: string;
      effect: string;
    }[];
    expect(history.every((h) => h.carrier === 'twilio')).toBe(true);
    expect(history.filter((h) => h.effect === 'applied').map((h) => h)).toHaveLength(3); // queued, sent, delivered
  });

  it('a callback with a bad signature is 401 and stores nothing; a verified body that is no Twilio webhook is 400', async () => {
    const before = await count(db.pool, 'SELECT * FROM carrier_events');
    const params = { MessageSid: `SM${'a'.repeat(32)}`, MessageStatus: 'delivered', To: DELIVERS, From: OURS };
    expect((await post(params, { token: 'not-the-token' })).status).toBe(401);
    expect((await post(params, { signedUrl: `${ingest()}?x=1` })).status).toBe(401);
    const unsigned = await fetch(ingest(), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(params).toString(),
    });
    expect(unsigned.status).toBe(401);
    expect((await post({ Hello: 'world' })).status).toBe(400);
    expect(await count(db.pool, 'SELECT * FROM carrier_events')).toBe(before);
  });

  it('behind a proxy the signature verifies only against HANDSET_PUBLIC_INGEST_URL', async () => {
    // A reverse proxy publishes ingest under /hooks; Twilio signs the URL it calls: the proxy's.
    let upstream = new URL(ingest()).host;
    const proxy = http.createServer((req, res) => {
      const [host, port] = upstream.split(':');
      const out = http.request(
        {
          host,
          port,
          path: req.url!.replace(/^\/hooks/, ''),
          method: req.method,
          headers: { ...req.headers, host: upstream },
        },
        (up) => {
          res.writeHead(up.statusCode!, up.headers);
          up.pipe(res);
        },
      );
      req.pipe(out);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const publicBase = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/hooks`;
    const behind = await startTestPlatform({
      databaseUrl: db.url,
      roles: ['ingest'],
      env: { ...c.env, HANDSET_PUBLIC_INGEST_URL: publicBase },
    });
    try {
      const params = {
        MessageSid: `SM${'b'.repeat(32)}`,
        SmsStatus: 'received',
        From: '+14155550999',
        To: OURS,
        Body: 'through the proxy',
        NumMedia: '0',
        AccountSid: c.twilio.accountSid,
      };
      const before = await count(db.pool, 'SELECT * FROM carrier_events');
      // An ingest left with its default public URL (its own address) refuses what Twilio signed for the proxy's.
      expect((await post(params, { url: `${publicBase}/webhooks/twilio` })).status).toBe(401);
      expect(await count(db.pool, 'SELECT * FROM carrier_events')).toBe(before);
      // The same request through the proxy to an ingest told its public URL verifies and stores once.
      upstream = new URL(behind.ingestUrl!).host;
      const r = await post(params, { url: `${publicBase}/webhooks/twilio` });
      expect(r.status).toBe(200);
      expect(r.type).toMatch(/^text\/xml/);
      expect(r.text).toBe('<?xml version="1.0" encoding="UTF-8"?><Response/>');
      expect((await post(params, { url: `${publicBase}/webhooks/twilio` })).status).toBe(200);
      expect(
        await count(db.pool, 'SELECT * FROM carrier_events WHERE carrier_event_id = $1', [
          `inbound:${params.MessageSid}`,
        ]),
      ).toBe(1);
    } finally {
      await behind.stop();
      await new Promise((r) => proxy.close(r));
    }
  });

  it('an inbound SMS repeated is one message; STOP via Twilio is one opt-out', async () => {
    const from = '+14155550310';
    const params = {
      ToCountry: 'US',
      SmsMessageSid: `SM${'c'.repeat(32)}`,
      NumMedia: '1',
      MediaUrl0: 'https://media.example/cat.jpg',
      MediaContentType0: 'image/jpeg',
      SmsSid: `SM${'c'.repeat(32)}`,
      SmsStatus: 'received',
      Body: 'hi there',
      To: OURS,
      MessageSid: `SM${'c'.repeat(32)}`,
      AccountSid: c.twilio.accountSid,
      From: from,
      ApiVersion: '2010-04-01',
    };
    for (let i = 0; i < 3; i++) {
      const r = await post(params);
      expect(r.status).toBe(200);
      expect(r.text).toBe('<?xml version="1.0" encoding="UTF-8"?><Response/>');
    }
    await settled();
    const inbound = await db.pool.query(`SELECT * FROM messages WHERE carrier = 'twilio' AND from_number = $1`, [from]);
    expect(inbound.rows).toHaveLength(1);
    expect(inbound.rows[0].media_urls).toEqual(['https://media.example/cat.jpg']);
    expect(await events(inbound.rows[0].id, 'message.received')).toBe(1);

    // STOP through the simulator (Twilio blocks the pair too), then again by hand under Twilio's retry.
    const stop = c.twilio.injectInboundSms({ from, to: OURS, text: 'Stop' });
    await eventually(
      async () => (await count(db.pool, `SELECT * FROM messages WHERE carrier_message_id = $1`, [stop.sid])) === 1,
    );
    await post({
      ...params,
      MessageSid: stop.sid,
      SmsSid: stop.sid,
      SmsMessageSid: stop.sid,
      Body: 'Stop',
      NumMedia: '0',
    });
    await settled();
    expect(await count(db.pool, 'SELECT * FROM opt_outs WHERE recipient = $1 AND deleted_at IS NULL', [from])).toBe(1);
    expect(
      await count(db.pool, `SELECT * FROM outbound_events WHERE type = 'opt_out.created' AND data->>'recipient' = $1`, [
        from,
      ]),
    ).toBe(1);
    const refused = await acme.post('/v1/messages', { from: OURS, to: from, body: 'still there?' });
    expect(refused.status).toBe(422);
    expect(refused.json.code).toBe('recipient_opted_out');
  });

  it('a send Twilio refuses with 21610 fails as recipient_opted_out and records the opt-out once', async () => {
    const who = '+14155550311';
    // Twilio alone heard this STOP (its webhook went nowhere): Handset learns it from the refusal.
    c.twilio.setWebhookUrl(null);
    c.twilio.injectInboundSms({ from: who, to: OURS, text: 'STOP' });
    c.twilio.setWebhookUrl(ingest());
    const id = await send(who, 'hello?');
    await eventually(async () => (await message(id)).status === 'failed');
    expect((await message(id)).error_code).toBe('recipient_opted_out');
    expect(c.twilio.creates.filter((x) => x.to === who && x.status === 400).length).toBe(1);
    expect(c.twilio.acceptedFor(id)).toBe(0);
    expect(await count(db.pool, `SELECT * FROM opt_outs WHERE recipient = $1 AND source = 'carrier'`, [who])).toBe(1);
    expect(await bills(id)).toBe(0);
  });

  it('an undelivered callback fails the message with Twilio’s error code; an MMS is billed as Twilio counts it', async () => {
    const id = await send(UNDELIVERED, 'no luck');
    await eventually(async () => (await message(id)).status === 'failed');
    expect((await message(id)).error_code).toBe('30003');
    const mms = await send(DELIVERS, 'a picture', {
      media_urls: ['https://media.example/a.png', 'https://media.example/b.png'],
    });
    await eventually(async () => (await message(mms)).status === 'delivered');
    const sid = (await message(mms)).carrier_message_id;
    expect(c.twilio.message(sid)?.mediaUrls).toEqual(['https://media.example/a.png', 'https://media.example/b.png']);
    const bill = await db.pool.query('SELECT kind, quantity FROM usage_records WHERE source_id = $1', [mms]);
    expect(bill.rows).toEqual([{ kind: 'mms_outbound', quantity: 1 }]);
    // num_segments is the carrier's part count: a 200-character text is two parts.
    const long = await send(DELIVERS, 'x'.repeat(200));
    await eventually(async () => (await message(long)).status === 'delivered');
    expect((await message(long)).carrier_segments).toBe(2);
  });

  it('a lost final callback is learned from GET …/Messages/{sid}.json, through the same path; the late callback changes nothing', async () => {
    const silent = '+14155550320';
    c.twilio.setPersona(silent, { lose: ['message.finalized'] });
    const id = await send(silent, 'are you there');
    await eventually(async () => (await message(id)).status === 'sent');
    await c.twilio.idle();
    await settled();
    expect((await message(id)).status).toBe('sent');
    await reconcilePass({
      pool: db.pool,
      carriers: carriers(testConfig(c.env)),
      log: createLogger('silent'),
      metrics: new Metrics({ defaultMetrics: false }),
      intervalMs: 60_000,
      afterMs: 0,
      messageAfterMs: 0,
    });
    await eventually(async () => (await message(id)).status === 'delivered');
    const sid = (await message(id)).carrier_message_id;
    // The callback Twilio never sent, now sent late: stored (its own id), refused by the guard.
    await post(
      { MessageSid: sid, SmsSid: sid, MessageStatus: 'delivered', SmsStatus: 'delivered', To: silent, From: OURS },
      { url: `${ingest()}?message=${id}` },
    );
    await settled();
    expect(await events(id, 'message.delivered')).toBe(1);
    const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as {
      source: string;
      effect: string;
    }[];
    expect(history.some((h) => h.source === 'reconciliation' && h.effect === 'applied')).toBe(true);
  });
});

describe('unknown outcomes at Twilio: looked for before anything is sent again', () => {
  it('Twilio sends, and its answer is lost: the message is found (its callbacks, its list), never sent twice', async () => {
    c.twilio.setBehaviour({ lostAnswerRate: 1 });
    const id = await send(DELIVERS, 'answer lost');
    await eventually(async () => c.twilio.acceptedFor(id) === 1);
    c.twilio.setBehaviour({ lostAnswerRate: 0 });
    await eventually(async () => (await message(id)).status === 'delivered', 30_000);
    expect(c.twilio.acceptedFor(id)).toBe(1);
    expect(await events(id, 'message.sent')).toBe(1);
    expect(await bills(id)).toBe(1);
    const sends = await db.pool.query('SELECT outcome, detail FROM message_sends WHERE message_id = $1 ORDER BY id', [
      id,
    ]);
    expect(sends.rows.map((r) => r.outcome)).toEqual(['accepted']);
    expect(sends.rows[0].detail).toMatch(/twilio has it|twilio lists it/);
  });

  it('Twilio answers 500 having sent nothing: it shows none, so the message is sent again, once', async () => {
    c.twilio.setBehaviour({ serverErrorRate: 1 });
    const id = await send(DELIVERS, 'server error');
    await eventually(async () => c.twilio.creates.some((x) => x.marker === id && x.status === 500));
    c.twilio.setBehaviour({ serverErrorRate: 0 });
    await eventually(async () => (await message(id)).status === 'delivered', 30_000);
    expect(c.twilio.acceptedFor(id)).toBe(1);
    const sends = await db.pool.query('SELECT outcome FROM message_sends WHERE message_id = $1 ORDER BY id', [id]);
    expect(sends.rows.map((r) => r.outcome)).toEqual(['not_accepted', 'accepted']);
    expect(await bills(id)).toBe(1);
  });
});
