// Messaging, exactly once: carrier receipts that are duplicated, contradictory,
// re-sent under new event ids or early produce one message, one terminal status,
// one bill and one customer event per transition. Everything goes through the
// real pipeline: signed webhooks into ingest, the worker, the outbox, a receiver.

import { retryPolicies } from '../../src/jobs/retry.js';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processCarrierEvent } from '../../src/carrier/process.js';
import { dispatchMessage } from '../../src/messages/dispatch.js';
import { messageHandlers } from '../../src/messages/receipts.js';
import { segmentsOf } from '../../src/messages/segments.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, telnyxWebhook, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';
import { telnyxCarriers } from '../support/carrier.js';

const OUR_NUMBER = '+13125550001';
const SILENT = '+15555550105'; // the simulator's persona: message.sent, never finalized
const REJECTED = '+15555550103'; // refused at send: 422, 40310

const policies = retryPolicies(3000);
let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;
let receiver: Receiver;
const log = createLogger('silent');

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'messages' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: sim.carrierEnv(),
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  expect((await acme.post('/v1/phone_numbers', { number: OUR_NUMBER })).status).toBe(201);
  receiver = await startReceiver();
  const ep = await acme.post('/v1/webhook_endpoints', { url: receiver.url });
  receiver.secrets = [ep.json.secret];
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await receiver.close();
  await db.drop();
});

/** Customer events about a message (of one type, if given), in `pool`'s database: the file's unless said. */
const events = (messageId: string, type?: string, pool = db.pool) =>
  count(pool, `SELECT * FROM outbound_events WHERE subject_id = $1 AND ($2::text IS NULL OR type = $2)`, [
    messageId,
    type ?? null,
  ]);
const billed = (messageId: string) =>
  db.pool
    .query(
      `SELECT kind, sum(quantity)::int AS q, count(*)::int AS rows FROM usage_records WHERE source_id = $1 GROUP BY kind`,
      [messageId],
    )
    .then((r) => r.rows);
const message = async (id: string) => (await acme.get(`/v1/messages/${id}`)).json;
const allProcessed = () =>
  eventually(
    async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    20_000,
  );
const carrierSends = () => sim.requests.filter((r) => r.method === 'POST' && r.path === '/v2/messages').length;

/** A receipt stored but held back from the relay (run_after), so the runs a test makes are the only ones. */
async function heldReceipt(carrierId: string, to: string, status: 'delivered' | 'delivery_failed'): Promise<string> {
  const eventId = randomUUID();
  const body = telnyxWebhook.messageFinalized({ messageId: carrierId, from: OUR_NUMBER, to, status, eventId });
  const { rows } = await db.pool.query(
    `INSERT INTO carrier_events (carrier_event_id, event_type, payload, run_after)
       VALUES ($1, 'message.finalized', $2::jsonb, 'infinity') RETURNING id`,
    [eventId, body],
  );
  return rows[0].id;
}
/** What processCarrierEvent needs to run receipts through `pool`. */
const receiptDeps = (pool: typeof db.pool = db.pool) => ({
  pool,
  carriers: telnyxCarriers(),
  handlers: messageHandlers,
  log,
  notReady: policies.notReady,
});

async function sendAndWaitSent(to: string, body = 'Hello there!'): Promise<{ id: string; carrierId: string }> {
  const res = await acme.post('/v1/messages', { from: OUR_NUMBER, to, body });
  expect(res.status).toBe(201);
  const sent = await eventually(async () => {
    const m = await message(res.json.id);
    return m.status === 'sent' && m;
  });
  return { id: res.json.id, carrierId: sent.carrier_message_id };
}

describe('inbound SMS', () => {
  it('the same SMS replayed ten times (sequentially and concurrently) and re-sent under two new event ids is one message, one event, one bill', async () => {
    const carrierId = randomUUID();
    const fact = { messageId: carrierId, from: '+14155550123', to: OUR_NUMBER, text: 'Is this thing on? 👋' };
    const body = telnyxWebhook.messageReceived({ ...fact, eventId: randomUUID() });
    for (let i = 0; i < 5; i++) expect(await sim.deliver(body)).toBe(200);
    expect(await Promise.all(Array.from({ length: 5 }, () => sim.deliver(body)))).toEqual(Array(5).fill(200));
    for (let i = 0; i < 2; i++)
      expect(await sim.deliver(telnyxWebhook.messageReceived({ ...fact, eventId: randomUUID() }))).toBe(200);
    await allProcessed();

    const { rows } = await db.pool.query('SELECT * FROM messages WHERE carrier_message_id = $1', [carrierId]);
    expect(rows).toHaveLength(1);
    const m = rows[0];
    expect(m).toMatchObject({
      direction: 'inbound',
      status: 'received',
      from_number: '+14155550123',
      to_number: OUR_NUMBER,
      account_id: acme.accountId,
      encoding: 'UCS-2',
      segments: 1,
    });
    expect(
      await count(db.pool, 'SELECT * FROM carrier_events WHERE payload @> $1::jsonb', [
        JSON.stringify({ data: { payload: { id: carrierId } } }),
      ]),
    ).toBe(3);
    expect(await events(m.id, 'message.received')).toBe(1);
    expect(await billed(m.id)).toEqual([{ kind: 'sms_segment_inbound', q: 1, rows: 1 }]);
    await eventually(async () => receiver.events().filter((e) => e.data['id'] === m.id).length === 1);
  });

  it('an SMS to a number no account owns is recorded as an error on the carrier event, processed once, with no effect', async () => {
    const carrierId = randomUUID();
    expect(
      await sim.deliver(
        telnyxWebhook.messageReceived({ messageId: carrierId, from: '+14155550123', to: '+19995550000', text: 'hi' }),
      ),
    ).toBe(200);
    await allProcessed();
    const { rows } = await db.pool.query(
      `SELECT error FROM carrier_events WHERE payload->'data'->'payload'->>'id' = $1`,
      [carrierId],
    );
    expect(rows).toEqual([{ error: 'no account owns +19995550000 at telnyx' }]);
    expect(await count(db.pool, 'SELECT * FROM messages WHERE carrier_message_id = $1', [carrierId])).toBe(0);
  });
});

describe('outbound receipts', () => {
  it('delivered ×3, then delivery_failed under a new id, then delivered again: delivered, one message.sent, one message.delivered, no message.failed, billed once', async () => {
    const { id, carrierId } = await sendAndWaitSent(SILENT, 'Hello there!');
    const facts = { messageId: carrierId, from: OUR_NUMBER, to: SILENT, text: 'Hello there!' };
    const delivered = telnyxWebhook.messageFinalized({ ...facts, status: 'delivered', eventId: randomUUID() });
    for (let i = 0; i < 3; i++) await sim.deliver(delivered);
    await sim.deliver(
      telnyxWebhook.messageFinalized({
        ...facts,
        status: 'delivery_failed',
        errorCode: '40008',
        eventId: randomUUID(),
      }),
    );
    await sim.deliver(telnyxWebhook.messageFinalized({ ...facts, status: 'delivered', eventId: randomUUID() }));
    await allProcessed();

    expect(await message(id)).toMatchObject({ status: 'delivered', error_code: null, segments: 1, encoding: 'GSM-7' });
    expect(await events(id, 'message.sent')).toBe(1);
    expect(await events(id, 'message.delivered')).toBe(1);
    expect(await events(id, 'message.failed')).toBe(0);
    expect(await billed(id)).toEqual([{ kind: 'sms_segment_outbound', q: 1, rows: 1 }]);
    await eventually(
      async () =>
        receiver
          .events()
          .filter((e) => e.data['id'] === id)
          .map((e) => e.type)
          .sort()
          .join() === 'message.delivered,message.sent',
    );

    // support can see why: every receipt, the refused ones marked as such
    const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data;
    const carrier = history.filter((h: { source: string }) => h.source === 'carrier');
    expect(carrier.map((h: { effect: string; carrier_status: string }) => `${h.carrier_status}:${h.effect}`)).toEqual(
      expect.arrayContaining([
        'sent:informational',
        'delivered:applied',
        'delivery_failed:refused',
        'delivered:refused',
      ]),
    );
    expect(carrier.filter((h: { effect: string }) => h.effect === 'applied')).toHaveLength(1);
  });

  it('a receipt that arrives before the dispatcher stamps the carrier id is retried, then applies once', async () => {
    sim.setBehaviour({ earlyReceiptRate: 1 });
    try {
      const res = await acme.post('/v1/messages', { from: OUR_NUMBER, to: '+15555550100', body: 'early bird' });
      const m = await eventually(async () => {
        const got = await message(res.json.id);
        return got.status === 'delivered' && got;
      }, 30_000);
      // the receipts were stored before our send committed, failed at least once, then applied
      const { rows } = await db.pool.query(
        `SELECT ce.created_at < m.sent_at AS early FROM carrier_events ce JOIN messages m ON m.carrier_message_id = ce.payload->'data'->'payload'->>'id'
          WHERE m.id = $1 AND ce.event_type = 'message.finalized'`,
        [m.id],
      );
      expect(rows).toEqual([{ early: true }]);
      expect(await events(m.id, 'message.delivered')).toBe(1);
      expect(await events(m.id, 'message.sent')).toBe(1);
    } finally {
      sim.setBehaviour({ earlyReceiptRate: 0 });
    }
  });

  it('a refused receipt names the status that won, not the one read before the row lock', async () => {
    const { id, carrierId } = await sendAndWaitSent(SILENT);
    const rowId = await heldReceipt(carrierId, SILENT, 'delivery_failed');
    // Another receipt's transaction has made the message delivered and not committed yet.
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`UPDATE messages SET status = 'delivered', completed_at = now() WHERE id = $1`, [id]);
      const processing = processCarrierEvent(receiptDeps(), rowId);
      await new Promise((r) => setTimeout(r, 300)); // it has read the message as sent and waits on the lock
      await locker.query('COMMIT');
      expect(await processing).toBe('ignored');
    } finally {
      locker.release();
    }
    const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as { effect: string }[];
    expect(history.filter((h) => h.effect === 'refused')).toEqual([
      expect.objectContaining({ effect: 'refused', status: 'failed', note: 'message already delivered' }),
    ]);
  });

  it('a receipt whose message got its carrier id after the finalizing UPDATE looked is applied, not refused', async () => {
    const { id, carrierId } = await sendAndWaitSent(SILENT);
    // As before the dispatcher's commit: no carrier id yet.
    await db.pool.query(`UPDATE messages SET status = 'queued', carrier_message_id = NULL WHERE id = $1`, [id]);
    const rowId = await heldReceipt(carrierId, SILENT, 'delivered');
    // The dispatcher's stamp, not committed yet: the UPDATE cannot see it, and does not wait for it.
    const dispatcher = await db.pool.connect();
    try {
      await dispatcher.query('BEGIN');
      await dispatcher.query(`UPDATE messages SET status = 'sent', carrier_message_id = $2 WHERE id = $1`, [
        id,
        carrierId,
      ]);
      // It commits between the receipt's UPDATE and the read after it.
      const pool = new Proxy(db.pool, {
        get(target, key) {
          if (key !== 'connect') return Reflect.get(target, key);
          return async () => {
            const client = await target.connect();
            const { query, release } = { query: client.query.bind(client), release: client.release };
            Object.assign(client, {
              query: async (q: { name?: string }, ...rest: unknown[]) => {
                if (q?.name === 'message_by_carrier_id') await dispatcher.query('COMMIT').catch(() => undefined);
                return (query as (...a: unknown[]) => unknown)(q, ...rest);
              },
              release: (err?: Error) => {
                delete (client as { query?: unknown }).query; // the prototype's again
                client.release = release;
                client.release(err);
              },
            });
            return client;
          };
        },
      });
      expect(await processCarrierEvent(receiptDeps(pool), rowId)).toBe('applied');
    } finally {
      await dispatcher.query('ROLLBACK').catch(() => undefined);
      dispatcher.release();
    }
    expect((await message(id)).status).toBe('delivered');
    expect(await events(id, 'message.delivered')).toBe(1);
  });

  it('two workers racing on the same receipt, under two event ids, make one transition', async () => {
    const { id, carrierId } = await sendAndWaitSent(SILENT);
    {
      // Held back from the relay, so the racing workers below are the only ones that see them.
      const rowIds: string[] = [];
      for (let i = 0; i < 4; i++)
        rowIds.push(await heldReceipt(carrierId, SILENT, i % 2 ? 'delivery_failed' : 'delivered'));
      const deps = receiptDeps();
      const outcomes = await Promise.all([...rowIds, ...rowIds].map((row) => processCarrierEvent(deps, row)));
      expect(outcomes.filter((o) => o === 'applied')).toHaveLength(1);
      expect((await events(id, 'message.delivered')) + (await events(id, 'message.failed'))).toBe(1);
      expect(['delivered', 'failed']).toContain((await message(id)).status);
    }
  });
});

describe('dispatch', () => {
  const deps = () => ({
    pool: db.pool,
    carriers: telnyxCarriers({ apiUrl: sim.url, apiKey: sim.apiKey }),
    log,
    policy: policies.dispatch,
  });

  it('a dispatcher re-run after its transaction committed sends nothing to the carrier, transitions nothing, bills nothing', async () => {
    const before = carrierSends();
    const { id } = await sendAndWaitSent(SILENT);
    expect(carrierSends()).toBe(before + 1);
    expect(await dispatchMessage(deps(), id)).toBe('nothing_to_send');
    expect(carrierSends()).toBe(before + 1);
    expect(await events(id, 'message.sent')).toBe(1);
    expect(await billed(id)).toEqual([{ kind: 'sms_segment_outbound', q: 1, rows: 1 }]);
  });

  it('a carrier rejection marks the message failed with its code, once, bills nothing, and a re-run changes nothing', async () => {
    const res = await acme.post('/v1/messages', { from: OUR_NUMBER, to: REJECTED, body: 'nope' });
    const m = await eventually(async () => {
      const got = await message(res.json.id);
      return got.status === 'failed' && got;
    });
    expect(m.error_code).toBe('40310');
    expect(await dispatchMessage(deps(), m.id)).toBe('nothing_to_send');
    expect(await events(m.id, 'message.failed')).toBe(1);
    expect(await events(m.id)).toBe(1);
    expect(await billed(m.id)).toEqual([]);
  });

  it('429 and 5xx are retried with backoff, honouring retry-after, then sent once', async () => {
    sim.setBehaviour({ rateLimitRate: 1 });
    const before = carrierSends();
    const res = await acme.post('/v1/messages', { from: OUR_NUMBER, to: SILENT, body: 'patience' });
    await eventually(async () => carrierSends() >= before + 1);
    sim.setBehaviour({ rateLimitRate: 0 });
    const m = await eventually(async () => {
      const got = await message(res.json.id);
      return got.status === 'sent' && got;
    }, 20_000);
    expect(carrierSends()).toBeGreaterThanOrEqual(before + 2);
    expect(await events(m.id, 'message.sent')).toBe(1);
  });
});

describe('scheduling', () => {
  // Its own database and API with no worker beside it: the test moves the message
  // through its states with a clock of its own, and a worker's dispatcher would take
  // a message from the line at the real time, in a race with the test's own call.
  let own: { db: TestDatabase; platform: Platform; acme: ApiClient };
  beforeAll(async () => {
    const ownDb = await createTestDatabase();
    const ownPlatform = await startTestPlatform({ databaseUrl: ownDb.url, roles: ['api'], env: sim.carrierEnv() });
    own = { db: ownDb, platform: ownPlatform, acme: await createAccount(ownDb.pool, ownPlatform.apiUrl!, 'Acme') };
    expect((await own.acme.post('/v1/phone_numbers', { number: OUR_NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await own.platform.stop();
    await own.db.drop();
  });
  it('a scheduled message is dispatched at send_at, not before (time is a parameter)', async () => {
    const sendAt = new Date(Date.now() + 3600_000);
    const res = await own.acme.post('/v1/messages', {
      from: OUR_NUMBER,
      to: SILENT,
      body: 'later',
      send_at: sendAt.toISOString(),
    });
    expect(res.json).toMatchObject({ status: 'scheduled', send_at: sendAt.toISOString() });
    const carriers = telnyxCarriers({ apiUrl: sim.url, apiKey: sim.apiKey });
    const before = carrierSends();
    expect(
      await dispatchMessage(
        { pool: own.db.pool, carriers, log, policy: policies.dispatch, now: () => new Date(sendAt.getTime() - 1000) },
        res.json.id,
      ),
    ).toBe('not_due');
    expect(carrierSends()).toBe(before);
    const due = {
      pool: own.db.pool,
      carriers,
      log,
      policy: policies.dispatch,
      now: () => new Date(sendAt.getTime() + 1000),
    };
    // Due: it joins its account's backlog (a cancel is refused from here), then its turn sends it.
    expect(await dispatchMessage(due, res.json.id)).toBe('in_line');
    expect(carrierSends()).toBe(before);
    expect((await own.acme.post(`/v1/messages/${res.json.id}/cancel`)).status).toBe(409);
    expect(await dispatchMessage(due, res.json.id)).toBe('sent');
    expect(carrierSends()).toBe(before + 1);
    expect((await own.acme.get(`/v1/messages/${res.json.id}`)).json).toMatchObject({
      status: 'sent',
      sent_at: new Date(sendAt.getTime() + 1000).toISOString(),
    });
    // now that it is sent, cancel is a conflict
    const late = await own.acme.post(`/v1/messages/${res.json.id}/cancel`);
    expect(late.status).toBe(409);
    expect(late.json.code).toBe('message_not_cancelable');
  });

  it('canceled before send_at: never sent, one message.canceled', async () => {
    const sendAt = new Date(Date.now() + 3600_000);
    const res = await own.acme.post('/v1/messages', {
      from: OUR_NUMBER,
      to: SILENT,
      body: 'never',
      send_at: sendAt.toISOString(),
    });
    const canceled = await own.acme.post(`/v1/messages/${res.json.id}/cancel`);
    expect(canceled.status).toBe(200);
    expect(canceled.json.status).toBe('canceled');
    expect((await own.acme.post(`/v1/messages/${res.json.id}/cancel`)).status).toBe(409);
    const before = carrierSends();
    const carriers = telnyxCarriers({ apiUrl: sim.url, apiKey: sim.apiKey });
    expect(
      await dispatchMessage(
        { pool: own.db.pool, carriers, log, policy: policies.dispatch, now: () => new Date(sendAt.getTime() + 1000) },
        res.json.id,
      ),
    ).toBe('nothing_to_send');
    expect(carrierSends()).toBe(before);
    expect(await events(res.json.id, 'message.canceled', own.db.pool)).toBe(1);
    expect(await events(res.json.id, undefined, own.db.pool)).toBe(1);
    expect(
      await count(own.db.pool, `SELECT * FROM graphile_worker.jobs WHERE key = $1`, [
        `message.dispatch:${res.json.id}`,
      ]),
    ).toBe(0);
  });
});

describe('bad input', () => {
  it.each([
    [{ from: OUR_NUMBER, to: '4155550100', body: 'x' }, 'invalid_phone_number', 'to'],
    [{ from: '1-415-555-0100', to: '+14155550100', body: 'x' }, 'invalid_phone_number', 'from'],
    [{ from: '+14155559999', to: '+14155550100', body: 'x' }, 'from_not_owned', 'from'],
    [{ from: OUR_NUMBER, to: '+14155550100' }, 'empty_message', 'body'],
    [{ from: OUR_NUMBER, to: '+14155550100', body: '' }, 'empty_message', 'body'],
    [{ from: OUR_NUMBER, to: '+14155550100', body: 'x'.repeat(1601) }, 'invalid_request', 'body'],
    [
      { from: OUR_NUMBER, to: '+14155550100', body: 'x', send_at: new Date(Date.now() - 60_000).toISOString() },
      'invalid_send_at',
      'send_at',
    ],
    [
      {
        from: OUR_NUMBER,
        to: '+14155550100',
        body: 'x',
        send_at: new Date(Date.now() + 36 * 86_400_000).toISOString(),
      },
      'invalid_send_at',
      'send_at',
    ],
    [{ from: OUR_NUMBER, to: '+14155550100', body: 'x', send_at: 'tomorrow' }, 'invalid_send_at', 'send_at'],
    [
      { from: OUR_NUMBER, to: '+14155550100', media_urls: ['http://insecure.example/cat.png'] },
      'invalid_media_url',
      'media_urls.0',
    ],
    [
      { from: OUR_NUMBER, to: '+14155550100', body: 'x', media_urls: Array(11).fill('https://a.example/x.png') },
      'invalid_request',
      'media_urls',
    ],
  ])('%o is 422 %s and creates nothing', async (body, code, param) => {
    const before = await count(db.pool, 'SELECT * FROM messages');
    const res = await acme.post('/v1/messages', body);
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ code, param });
    expect(await count(db.pool, 'SELECT * FROM messages')).toBe(before);
  });

  it("another account's message is 404 to read and to cancel", async () => {
    const other = await createAccount(db.pool, platform.apiUrl!, 'Other');
    const { id } = await sendAndWaitSent(SILENT);
    expect((await other.get(`/v1/messages/${id}`)).status).toBe(404);
    expect((await other.post(`/v1/messages/${id}/cancel`)).status).toBe(404);
    expect((await other.get(`/v1/messages/${id}/status_history`)).status).toBe(404);
    expect((await other.get('/v1/messages')).json.data).toEqual([]);
  });
});

describe('reading', () => {
  it('lists filter by status and direction; usage comes from the ledger', async () => {
    const inbound = await acme.get('/v1/messages?direction=inbound&limit=100');
    expect(inbound.json.data.length).toBeGreaterThan(0);
    expect(inbound.json.data.every((m: { direction: string }) => m.direction === 'inbound')).toBe(true);
    const failed = await acme.get('/v1/messages?status=failed');
    expect(failed.json.data.every((m: { status: string }) => m.status === 'failed')).toBe(true);
    const usage = await acme.get('/v1/usage');
    const outbound = await count(
      db.pool,
      `SELECT * FROM messages WHERE account_id = $1 AND direction = 'outbound' AND sent_at IS NOT NULL`,
      [acme.accountId],
    );
    expect(usage.json.data).toEqual(
      expect.arrayContaining([
        { kind: 'sms_segment_outbound', quantity: outbound },
        { kind: 'sms_segment_inbound', quantity: 1 },
      ]),
    );
  });
});

describe('segments', () => {
  it.each([
    ['a'.repeat(160), 'GSM-7', 1],
    ['a'.repeat(161), 'GSM-7', 2],
    ['a'.repeat(306), 'GSM-7', 2],
    ['a'.repeat(307), 'GSM-7', 3],
    ['€'.repeat(80), 'GSM-7', 1], // extension characters count 2
    ['€'.repeat(81), 'GSM-7', 2],
    ['^{}\\[~]|'.repeat(10), 'GSM-7', 1], // 80 extension characters = 160 septets
    ['^{}\\[~]|'.repeat(10) + 'a', 'GSM-7', 2],
    ['é'.repeat(70) + 'ç', 'UCS-2', 2], // ç is not GSM-7 (Ç is)
    ['ж'.repeat(70), 'UCS-2', 1],
    ['ж'.repeat(71), 'UCS-2', 2],
    ['ж'.repeat(134), 'UCS-2', 2],
    ['ж'.repeat(135), 'UCS-2', 3],
    ['😀' + 'a'.repeat(68), 'UCS-2', 1], // 2 UTF-16 units + 68 = 70
    ['😀' + 'a'.repeat(69), 'UCS-2', 2],
  ])('%#: %s… is %s in %i segment(s)', (body, encoding, segments) => {
    expect(segmentsOf(body)).toEqual({ encoding, segments });
  });

  it('any media makes it one MMS', () => {
    expect(segmentsOf('a'.repeat(500), ['https://a.example/x.png'])).toEqual({ encoding: 'MMS', segments: 1 });
    expect(segmentsOf(null, ['https://a.example/x.png'])).toEqual({ encoding: 'MMS', segments: 1 });
  });
});
