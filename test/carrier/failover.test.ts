// Failover between carriers never sends twice. A message with a fallback number
// (on Twilio) leaves Telnyx only when Telnyx certainly did not take it: its
// connections refused, or marked down after refusals (no request made to it).
// An answer that is merely late (Telnyx stalls) is never a reason: the message
// waits for Telnyx's own word, its replay of the first send. Every message is
// counted at both simulators: accepted by exactly one carrier.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAudit } from '../../src/audit/audit.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { startTwoCarriers, type TwoCarriers } from '../support/carriers.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';

const ON_TELNYX = '+13125550401';
const ON_TWILIO = '+13125550402';
const DELIVERS = '+15555550100';

let db: TestDatabase;
let c: TwoCarriers;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  c = await startTwoCarriers({
    databaseUrl: db.url,
    env: { HANDSET_CARRIER_RETRY_AFTER: '1s', HANDSET_CARRIER_DOWN_AFTER: '3', HANDSET_CARRIER_TIMEOUT: '1s' },
  });
  acme = await createAccount(db.pool, c.platform.apiUrl!, 'Failover customer');
  expect((await acme.post('/v1/phone_numbers', { number: ON_TELNYX, carrier: 'telnyx' })).status).toBe(201);
  expect((await acme.post('/v1/phone_numbers', { number: ON_TWILIO, carrier: 'twilio' })).status).toBe(201);
});
afterAll(async () => {
  await c.close();
  await db.drop();
});

const send = async (body: string, extra: object = { fallback_from: ON_TWILIO }) => {
  const res = await acme.post('/v1/messages', { from: ON_TELNYX, to: DELIVERS, body, ...extra });
  expect(res.status).toBe(201);
  return res.json.id as string;
};
const message = async (id: string) => (await acme.get(`/v1/messages/${id}`)).json;
const sentEvents = (id: string) =>
  count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = $1 AND type = 'message.sent'`, [id]);
const bills = (id: string) => count(db.pool, 'SELECT * FROM usage_records WHERE source_id = $1', [id]);
const accepted = (id: string) => ({ telnyx: c.telnyxAccepted(id), twilio: c.twilio.acceptedFor(id) });
describe('failover', () => {
  it('a fallback must be a number of the account on another carrier: 422 invalid_fallback, nothing stored', async () => {
    const before = await count(db.pool, 'SELECT * FROM messages');
    for (const fallback of [ON_TELNYX, '+13125550499']) {
      const r = await acme.post('/v1/messages', { from: ON_TELNYX, to: DELIVERS, body: 'x', fallback_from: fallback });
      expect(r.status).toBe(422);
      expect(r.json.code).toBe('invalid_fallback');
    }
    expect(await count(db.pool, 'SELECT * FROM messages')).toBe(before);
  });

  it('Telnyx refusing connections: the message goes once, through Twilio, from the fallback; history and event say why', async () => {
    await c.telnyx.setDown('refuse');
    try {
      const id = await send('telnyx is down');
      await eventually(async () => (await message(id)).status === 'delivered', 20_000);
      const m = await message(id);
      expect(m.carrier).toBe('twilio');
      expect(m.from).toBe(ON_TWILIO);
      expect(m.fallback_from).toBe(ON_TWILIO);
      expect(m.failover).toMatchObject({ carrier: 'telnyx', from: ON_TELNYX });
      expect(m.failover.reason).toMatch(/ECONNREFUSED/);
      expect(accepted(id)).toEqual({ telnyx: 0, twilio: 1 });
      expect(await sentEvents(id)).toBe(1);
      expect(await bills(id)).toBe(1);
      const event = await db.pool.query(
        `SELECT data FROM outbound_events WHERE subject_id = $1 AND type = 'message.sent'`,
        [id],
      );
      expect(event.rows[0].data).toMatchObject({ carrier: 'twilio', from: ON_TWILIO, failover: { carrier: 'telnyx' } });
      const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as {
        carrier: string;
        note: string | null;
        status: string;
      }[];
      expect(history.some((h) => h.carrier === 'telnyx' && /failing over to twilio/.test(h.note ?? ''))).toBe(true);
      expect(history.find((h) => h.status === 'sent')?.carrier).toBe('twilio');
    } finally {
      await c.telnyx.setDown('up');
    }
  });

  it('after refusals in a row Telnyx is marked down: a message fails over with no request made to it; a probe brings it back', async () => {
    await c.telnyx.setDown('refuse');
    const ids: string[] = [];
    const telnyxStatus = async () =>
      ((await acme.get('/v1/carriers')).json.data as { name: string; status: string }[]).find(
        (x) => x.name === 'telnyx',
      )?.status;
    const leftTelnyx = async (id: string) => {
      await eventually(async () => (await message(id)).carrier === 'twilio', 20_000);
      ids.push(id);
    };
    try {
      // One at a time, each gone before the next is made: messages the dispatcher
      // holds together may all be sent before any refusal is noted.
      while ((await telnyxStatus()) !== 'down') {
        expect(ids.length).toBeLessThan(3);
        await leftTelnyx(await send(`refused ${ids.length}`));
      }
      // Marked down: the next leaves without a request. A machine slow enough to
      // let the 1 s wait run out makes it the probe instead (refused: down again),
      // so a few are allowed for one to go without asking.
      let withoutAsking = 0;
      for (let i = 0; i < 3 && withoutAsking === 0; i++) {
        const id = await send(`while down ${i}`);
        await leftTelnyx(id);
        withoutAsking = await count(
          db.pool,
          `SELECT * FROM message_sends WHERE message_id = $1 AND detail LIKE 'no request made:%'`,
          [id],
        );
      }
      expect(withoutAsking).toBe(1);
      await eventually(async () => {
        for (const id of ids) if ((await message(id)).status !== 'delivered') return false;
        return true;
      }, 30_000);
      const carriers = (await acme.get('/v1/carriers')).json.data as {
        name: string;
        status: string;
        carries: string[];
      }[];
      expect(carriers.find((x) => x.name === 'telnyx')).toMatchObject({
        status: 'down',
        carries: ['messages', 'calls'],
      });
      expect(carriers.find((x) => x.name === 'twilio')).toMatchObject({ status: 'up', carries: ['messages'] });
      for (const id of ids) expect(accepted(id)).toEqual({ telnyx: 0, twilio: 1 });
    } finally {
      await c.telnyx.setDown('up');
    }
    // A message without a fallback waits for the probe, which finds Telnyx up.
    const plain = await send('after the outage', {});
    await eventually(async () => (await message(plain)).status === 'delivered', 20_000);
    expect(accepted(plain)).toEqual({ telnyx: 1, twilio: 0 });
    const carriers = (await acme.get('/v1/carriers')).json.data as { name: string; status: string }[];
    expect(carriers.find((x) => x.name === 'telnyx')?.status).toBe('up');
  });

  it('Telnyx stalls its answer: no failover while the outcome is unknown; Telnyx’s replay settles it; one carrier in total', async () => {
    await c.telnyx.setDown('stall');
    let id = '';
    try {
      id = await send('telnyx is slow');
      // Two sends made (the first and its repeat with the same key), neither answered.
      await eventually(async () => c.telnyx.requests.filter((r) => r.idempotencyKey === id).length >= 2, 20_000);
      const m = await message(id);
      expect(m.status).toBe('queued');
      expect(m.carrier).toBe('telnyx');
      expect(c.twilio.acceptedFor(id)).toBe(0);
    } finally {
      await c.telnyx.setDown('up');
    }
    await eventually(async () => (await message(id)).status === 'delivered', 30_000);
    const m = await message(id);
    expect(m.carrier).toBe('telnyx');
    expect(m.failover).toBeNull();
    expect(accepted(id)).toEqual({ telnyx: 1, twilio: 0 });
    expect(c.telnyx.requests.some((r) => r.idempotencyKey === id && r.replayed)).toBe(true);
    const sends = await db.pool.query('SELECT carrier, outcome FROM message_sends WHERE message_id = $1 ORDER BY id', [
      id,
    ]);
    expect(sends.rows.every((r) => r.carrier === 'telnyx')).toBe(true);
    expect(sends.rows.map((r) => r.outcome)).toContain('accepted');
    expect(await sentEvents(id)).toBe(1);
    expect(await bills(id)).toBe(1);
  });

  it('a burst of 100 while Telnyx flaps down and up: every message accepted by exactly one carrier, audit clean', async () => {
    // The first ten go while Telnyx is up and its breaker closed (a message
    // without a fallback probes it closed), so the burst holds both kinds
    // however slowly the machine dispatches the flapping part.
    const ids: string[] = [];
    const probe = await send('breaker probe', {});
    await eventually(async () => (await message(probe)).status === 'delivered', 30_000);
    ids.push(...(await Promise.all(Array.from({ length: 10 }, (_, i) => send(`steady ${i}`)))));
    await eventually(async () => ids.every((id) => c.telnyxAccepted(id) + c.twilio.acceptedFor(id) > 0), 30_000);
    expect(ids.map(accepted).filter((a) => a.telnyx !== 1)).toEqual([]);
    let flapping = true;
    const flaps = (async () => {
      let down = false;
      while (flapping) {
        down = !down;
        await c.telnyx.setDown(down ? 'refuse' : 'up');
        await new Promise((r) => setTimeout(r, 250 + Math.random() * 400));
      }
      await c.telnyx.setDown('up');
    })();
    try {
      for (let batch = 1; batch < 10; batch++) {
        const made = await Promise.all(Array.from({ length: 10 }, (_, i) => send(`burst ${batch}-${i}`)));
        ids.push(...made);
        await new Promise((r) => setTimeout(r, 150));
      }
      await new Promise((r) => setTimeout(r, 1500));
    } finally {
      flapping = false;
      await flaps;
    }
    await eventually(
      async () =>
        (await count(db.pool, `SELECT * FROM messages WHERE id = ANY($1) AND status = 'delivered'`, [ids])) ===
        ids.length,
      90_000,
      250,
    );
    const per = ids.map(accepted);
    expect(per.filter((a) => a.telnyx + a.twilio !== 1)).toEqual([]);
    const viaTwilio = per.filter((a) => a.twilio === 1).length;
    const failedOver = await count(
      db.pool,
      'SELECT * FROM messages WHERE id = ANY($1) AND failover_reason IS NOT NULL',
      [ids],
    );
    expect(failedOver).toBe(viaTwilio);
    expect(viaTwilio).toBeGreaterThan(0);
    expect(viaTwilio).toBeLessThan(ids.length);
    expect(await count(db.pool, 'SELECT * FROM usage_records WHERE source_id = ANY($1)', [ids])).toBe(ids.length);
    expect(
      await count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = ANY($1) AND type = 'message.sent'`, [ids]),
    ).toBe(ids.length);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    const audit = await runAudit(db.pool, { graceSeconds: 0 });
    expect(audit.checks.filter((x) => x.violations > 0)).toEqual([]);
    expect(audit.checks.find((x) => x.key === 'messages.one_carrier')?.checked).toBeGreaterThanOrEqual(ids.length);
    console.log(`burst: ${ids.length - viaTwilio} through Telnyx, ${viaTwilio} failed over to Twilio`);
  });

  it('the audit finds a message that two carriers took, or that failed over from a carrier that may have taken it', async () => {
    const { rows } = await db.pool.query(
      `SELECT id, failed_over_carrier, failed_over_from FROM messages WHERE failover_reason IS NOT NULL LIMIT 1`,
    );
    const m = rows[0];
    const planted = async (outcome: string, carrierMessageId: string | null) =>
      db.pool.query(
        `INSERT INTO message_sends (message_id, carrier, from_number, outcome, carrier_message_id, started_at)
         VALUES ($1, $2, $3, $4, $5, now()) RETURNING id`,
        [m.id, m.failed_over_carrier, m.failed_over_from, outcome, carrierMessageId],
      );
    const check = async () =>
      (await runAudit(db.pool, { graceSeconds: 0 })).checks.find((x) => x.key === 'messages.one_carrier')!;
    expect((await check()).violations).toBe(0);
    for (const [outcome, sid] of [
      ['accepted', 'telnyx-took-it-too'],
      ['unknown', null],
    ] as const) {
      const row = await planted(outcome, sid);
      const found = await check();
      expect(found.violations).toBe(1);
      expect(found.sample).toEqual([m.id]);
      await db.pool.query('DELETE FROM message_sends WHERE id = $1', [row.rows[0].id]);
    }
    expect((await check()).violations).toBe(0);
  });
});
