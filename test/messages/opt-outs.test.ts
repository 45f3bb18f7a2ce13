// Opt-outs through the real pipeline (API, worker, the simulated carrier, signed
// webhooks into ingest): a STOP however it is spelled, replayed or re-sent under a
// new id, opts its sender out once; a send to them is refused before the carrier
// hears of it; START opts them back in once; a scheduled message whose recipient
// opted out meanwhile fails without being sent; the carrier's own refusal (40300)
// fails the send and records the opt-out; and the list is the account's own.

import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, telnyxWebhook, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const OURS = '+13125550301';
const OUR_SECOND = '+13125550302';
const THEIRS = '+13125550401';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;
let globex: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'opt-outs' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: sim.carrierEnv(),
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  globex = await createAccount(db.pool, platform.apiUrl!, 'Globex');
  for (const number of [OURS, OUR_SECOND]) expect((await acme.post('/v1/phone_numbers', { number })).status).toBe(201);
  expect((await globex.post('/v1/phone_numbers', { number: THEIRS })).status).toBe(201);
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

let serial = 0;
/** A phone no test has used yet, in the range the simulator delivers to. */
const someone = () => `+1415555${String(1000 + ++serial).padStart(4, '0')}`;

const settled = () =>
  eventually(async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0);
const events = (type: string, subjectId: string) =>
  count(db.pool, 'SELECT * FROM outbound_events WHERE type = $1 AND subject_id = $2', [type, subjectId]);
const listed = async (client: ApiClient, number: string, recipient: string) =>
  (await client.get(`/v1/opt_outs?number=${encodeURIComponent(number)}&recipient=${encodeURIComponent(recipient)}`))
    .json.data as { id: string; source: string }[];
const carrierSendsTo = (to: string) =>
  sim.requests.filter(
    (r) => r.method === 'POST' && r.path.endsWith('/messages') && (r.body as { to?: string } | null)?.to === to,
  ).length;

/** An inbound text as the carrier's webhook, delivered; returns it so a test can deliver it again. */
async function texts(
  from: string,
  to: string,
  text: string,
): Promise<{ again: () => Promise<void>; resend: () => Promise<void> }> {
  const messageId = randomUUID();
  const body = telnyxWebhook.messageReceived({ messageId, from, to, text });
  expect(await sim.deliver(body)).toBe(200);
  return {
    again: async () => {
      expect(await sim.deliver(body)).toBe(200);
    },
    // The same SMS under a new event id.
    resend: async () => {
      expect(
        await sim.deliver(telnyxWebhook.messageReceived({ messageId, from, to, text, eventId: randomUUID() })),
      ).toBe(200);
    },
  };
}

describe('opt-out keywords', () => {
  it('STOP in six spellings, each replayed and re-sent under a new id, opts the sender out once, with one opt_out.created', async () => {
    const phone = someone();
    for (const spelling of ['STOP', 'stop', '  Stop  ', 'sToP\n', 'Unsubscribe', ' optout']) {
      const sms = await texts(phone, OURS, spelling);
      await sms.again();
      await sms.resend();
    }
    await settled();
    const list = await listed(acme, OURS, phone);
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({ source: 'keyword' });
    expect(await events('opt_out.created', list[0]!.id)).toBe(1);
    // Each text is still one inbound message, announced once.
    expect(
      await count(db.pool, `SELECT * FROM messages WHERE direction = 'inbound' AND from_number = $1`, [phone]),
    ).toBe(6);
    expect(
      await count(db.pool, `SELECT * FROM outbound_events WHERE type = 'message.received' AND data->>'from' = $1`, [
        phone,
      ]),
    ).toBe(6);
  });

  it('a send to an opted-out recipient is 422 recipient_opted_out: nothing stored, no carrier request, nothing billed; the account’s other number still sends', async () => {
    const phone = someone();
    await texts(phone, OURS, 'STOP');
    await settled();
    const before = await count(db.pool, 'SELECT * FROM messages WHERE to_number = $1', [phone]);
    const refused = await acme.post('/v1/messages', { from: OURS, to: phone, body: 'are you there?' });
    expect(refused.status).toBe(422);
    expect(refused.json).toMatchObject({ code: 'recipient_opted_out', param: 'to' });
    expect(await count(db.pool, 'SELECT * FROM messages WHERE to_number = $1', [phone])).toBe(before);
    expect(carrierSendsTo(phone)).toBe(0);

    const other = await acme.post('/v1/messages', { from: OUR_SECOND, to: phone, body: 'from the other line' });
    expect(other.status).toBe(201);
    await eventually(async () => (await acme.get(`/v1/messages/${other.json.id}`)).json.status === 'delivered');
    expect(await count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [other.json.id])).toBe(1);
    expect(carrierSendsTo(phone)).toBe(1);
  });

  it('START opts them back in once (one opt_out.deleted, replays change nothing) and sending works again', async () => {
    const phone = someone();
    await texts(phone, OURS, 'STOP');
    await settled();
    const [entry] = await listed(acme, OURS, phone);
    const start = await texts(phone, OURS, 'start');
    await start.again();
    await start.resend();
    await settled();
    expect(await listed(acme, OURS, phone)).toEqual([]);
    expect(await events('opt_out.deleted', entry!.id)).toBe(1);
    const sent = await acme.post('/v1/messages', { from: OURS, to: phone, body: 'welcome back' });
    expect(sent.status).toBe(201);
    await eventually(async () => (await acme.get(`/v1/messages/${sent.json.id}`)).json.status === 'delivered');
  });

  it('HELP is only a message: the list does not change', async () => {
    const phone = someone();
    await texts(phone, OURS, 'STOP');
    await texts(phone, OURS, 'HELP');
    await texts(phone, OUR_SECOND, 'info');
    await settled();
    expect(await listed(acme, OURS, phone)).toHaveLength(1);
    expect(await listed(acme, OUR_SECOND, phone)).toHaveLength(0);
  });

  it('a scheduled message whose recipient opts out before send_at fails as recipient_opted_out and never reaches the carrier', async () => {
    const phone = someone();
    const sendAt = new Date(Date.now() + 3_000).toISOString();
    const scheduled = await acme.post('/v1/messages', { from: OURS, to: phone, body: 'later', send_at: sendAt });
    expect(scheduled.status).toBe(201);
    await texts(phone, OURS, 'QUIT');
    const failed = await eventually(async () => {
      const m = (await acme.get(`/v1/messages/${scheduled.json.id}`)).json;
      return m.status === 'failed' && m;
    }, 20_000);
    expect(failed).toMatchObject({ error_code: 'recipient_opted_out', sent_at: null });
    expect(carrierSendsTo(phone)).toBe(0);
    expect(await events('message.failed', scheduled.json.id)).toBe(1);
    expect(await events('message.sent', scheduled.json.id)).toBe(0);
    expect(await count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [scheduled.json.id])).toBe(0);
  });
});

describe('the carrier’s opt-out', () => {
  it('a carrier refusal 40300 fails the send as recipient_opted_out and records the opt-out (source carrier) once', async () => {
    const phone = someone();
    // "STOP ALL" is a keyword at the carrier, not in Handset's list: only the carrier's refusal tells Handset.
    sim.injectInboundSms({ from: phone, to: OURS, text: 'Stop all' });
    await settled();
    expect(await listed(acme, OURS, phone)).toEqual([]);
    const res = await acme.post('/v1/messages', { from: OURS, to: phone, body: 'hello?' });
    expect(res.status).toBe(201);
    const failed = await eventually(async () => {
      const m = (await acme.get(`/v1/messages/${res.json.id}`)).json;
      return m.status === 'failed' && m;
    });
    expect(failed).toMatchObject({ error_code: 'recipient_opted_out' });
    const list = await listed(acme, OURS, phone);
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({ source: 'carrier' });
    expect(await events('opt_out.created', list[0]!.id)).toBe(1);
    expect(await events('message.failed', res.json.id)).toBe(1);
    expect(await count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [res.json.id])).toBe(0);
    // Now Handset knows: the next send is refused before the carrier is asked.
    const sendsBefore = carrierSendsTo(phone);
    expect((await acme.post('/v1/messages', { from: OURS, to: phone, body: 'hello?' })).status).toBe(422);
    expect(carrierSendsTo(phone)).toBe(sendsBefore);
  });
});

describe('/v1/opt_outs', () => {
  it('an entry made through the API is listed, announced, refuses sends, and ends with DELETE (announced once)', async () => {
    const phone = someone();
    const created = await acme.post('/v1/opt_outs', { number: OURS, recipient: phone });
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({
      number: OURS,
      recipient: phone,
      source: 'api',
      deleted_at: null,
      sequence: 1,
    });
    const again = await acme.post('/v1/opt_outs', { number: OURS, recipient: phone });
    expect(again.status).toBe(200);
    expect(again.json.id).toBe(created.json.id);
    expect(await events('opt_out.created', created.json.id)).toBe(1);
    expect((await acme.get(`/v1/opt_outs/${created.json.id}`)).json.id).toBe(created.json.id);
    expect((await acme.post('/v1/messages', { from: OURS, to: phone, body: 'x' })).status).toBe(422);

    const ended = await acme.delete(`/v1/opt_outs/${created.json.id}`);
    expect(ended.status).toBe(200);
    expect(ended.json).toMatchObject({ id: created.json.id, sequence: 2, deleted_at: expect.any(String) });
    expect((await acme.delete(`/v1/opt_outs/${created.json.id}`)).status).toBe(404);
    expect((await acme.get(`/v1/opt_outs/${created.json.id}`)).status).toBe(404);
    expect(await events('opt_out.deleted', created.json.id)).toBe(1);
    expect((await acme.post('/v1/messages', { from: OURS, to: phone, body: 'x' })).status).toBe(201);
  });

  it('an opt-out is the account’s own: another account neither sees nor ends it, nor enters one for a number it does not own', async () => {
    const phone = someone();
    const created = await acme.post('/v1/opt_outs', { number: OURS, recipient: phone });
    expect((await globex.get(`/v1/opt_outs/${created.json.id}`)).status).toBe(404);
    expect((await globex.delete(`/v1/opt_outs/${created.json.id}`)).status).toBe(404);
    expect((await globex.get(`/v1/opt_outs?recipient=${encodeURIComponent(phone)}`)).json.data).toEqual([]);
    const foreign = await globex.post('/v1/opt_outs', { number: OURS, recipient: phone });
    expect(foreign.status).toBe(422);
    expect(foreign.json).toMatchObject({ code: 'number_not_owned', param: 'number' });
    // Globex's own number to the same phone is a pair of its own.
    expect((await globex.post('/v1/messages', { from: THEIRS, to: phone, body: 'hi' })).status).toBe(201);
    expect(await listed(acme, OURS, phone)).toHaveLength(1);
  });

  it('bad input is a 422 naming the field, and changes nothing', async () => {
    const before = await count(db.pool, 'SELECT * FROM opt_outs');
    for (const body of [
      { number: OURS },
      { number: OURS, recipient: 'nope' },
      { number: OURS, recipient: someone(), x: 1 },
    ]) {
      const res = await acme.post('/v1/opt_outs', body);
      expect(res.status, JSON.stringify(body)).toBe(422);
    }
    expect(await count(db.pool, 'SELECT * FROM opt_outs')).toBe(before);
  });
});
