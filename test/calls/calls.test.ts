// Sequential ring, exactly once: duplicate and racing call events never dial a
// position twice, never dial after an answer, never bill a minute twice. The
// carrier is the simulator with "manual" personas, so each webhook is written by
// the test — and replayed, raced and re-sent under new ids through ingest.

import { retryPolicies } from '../../src/jobs/retry.js';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dialLeg } from '../../src/calls/commands.js';
import { encodeClientState } from '../../src/carrier/telnyx/events.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, telnyxWebhook, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { telnyxCarriers } from '../support/carrier.js';

const OUR_NUMBER = '+13125550100';
const INBOUND_NUMBER = '+13125550101';
const A = '+14155550201';
const B = '+14155550202';
const C = '+14155550203';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, seed: 'calls', connectionId: 'conn-test' });
  for (const n of [A, B, C]) sim.setPersona(n, { call: { manual: true } });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: sim.carrierEnv(),
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  expect((await acme.post('/v1/phone_numbers', { number: OUR_NUMBER })).status).toBe(201);
  expect(
    (await acme.post('/v1/phone_numbers', { number: INBOUND_NUMBER, inbound_ring: [A, B], ring_timeout_secs: 15 }))
      .status,
  ).toBe(201);
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

interface Leg {
  id: string;
  position: number;
  to_number: string;
  status: string;
  carrier_ref: string;
  call_id: string;
}

const dials = (to?: string) =>
  sim.requests.filter(
    (r) =>
      r.method === 'POST' &&
      r.path === '/v2/calls' &&
      !r.deduplicated &&
      !r.replayed &&
      r.status === 200 &&
      (!to || (r.body as { to?: string }).to === to),
  ).length;
const actions = (ccid: string, action: string) =>
  sim.requests.filter((r) => r.path === `/v2/calls/${ccid}/actions/${action}` && !r.deduplicated).length;
const getCall = async (id: string) => (await acme.get(`/v1/calls/${id}`)).json;
const events = (callId: string, type?: string) =>
  count(db.pool, 'SELECT * FROM outbound_events WHERE subject_id = $1 AND ($2::text IS NULL OR type = $2)', [
    callId,
    type ?? null,
  ]);
const minutes = (callId: string) =>
  db.pool
    .query(`SELECT quantity FROM usage_records WHERE source_id = $1 AND kind = 'call_minute'`, [callId])
    .then((r) => r.rows.map((x) => x.quantity));
const quiet = () =>
  eventually(
    async () =>
      (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0 &&
      (await count(db.pool, 'SELECT * FROM graphile_worker.jobs WHERE run_at <= now() AND task_identifier LIKE $1', [
        'call.%',
      ])) === 0,
    20_000,
  );

async function legAt(callId: string, position: number): Promise<Leg> {
  return eventually(async () => {
    const { rows } = await db.pool.query(
      'SELECT * FROM call_legs WHERE call_id = $1 AND position = $2 AND carrier_ref IS NOT NULL',
      [callId, position],
    );
    return rows[0] as Leg | undefined;
  });
}

function facts(leg: Leg) {
  return {
    callControlId: leg.carrier_ref,
    from: OUR_NUMBER,
    to: leg.to_number,
    clientState: encodeClientState({ c: leg.call_id, l: leg.id, p: leg.position }),
  };
}
const hangupOf = (leg: Leg, cause: string, at = new Date(), eventId = randomUUID()) =>
  telnyxWebhook.callHangup({ ...facts(leg), hangupCause: cause, eventId, occurredAt: at });
const answerOf = (leg: Leg, at = new Date(), eventId = randomUUID()) =>
  telnyxWebhook.callAnswered({ ...facts(leg), eventId, occurredAt: at });

async function place(to: string[], ringTimeout = 20) {
  const res = await acme.post('/v1/calls', { from: OUR_NUMBER, to, ring_timeout_secs: ringTimeout });
  expect(res.status).toBe(201);
  expect(res.json).toMatchObject({ status: 'ringing', to, direction: 'outbound' });
  return res.json.id as string;
}

describe('sequential ring', () => {
  it('the same hangup delivered twice, ten times concurrently and once more under a new event id dials the next target once', async () => {
    const before = { a: dials(A), b: dials(B), c: dials(C) };
    const callId = await place([A, B, C]);
    const a = await legAt(callId, 0);
    const timeout = hangupOf(a, 'timeout');
    expect(await sim.deliver(timeout)).toBe(200);
    expect(await sim.deliver(timeout)).toBe(200);
    expect(await Promise.all(Array.from({ length: 10 }, () => sim.deliver(timeout)))).toEqual(Array(10).fill(200));
    expect(await sim.deliver(hangupOf(a, 'timeout'))).toBe(200); // new event id
    await legAt(callId, 1);
    await quiet();
    expect({ a: dials(A) - before.a, b: dials(B) - before.b, c: dials(C) - before.c }).toEqual({ a: 1, b: 1, c: 0 });
    expect(await count(db.pool, 'SELECT * FROM call_legs WHERE call_id = $1', [callId])).toBe(2);
    const call = await getCall(callId);
    expect(call.status).toBe('ringing');
    expect(call.legs.map((l: { status: string }) => l.status)).toEqual(['no_answer', 'ringing']);
  });

  it('A times out, B answers (twice), B hangs up 61 s after answering (three times): completed, 61 s, 2 minutes billed once, a late A hangup changes nothing', async () => {
    const before = dials();
    const callId = await place([A, B, C]);
    const a = await legAt(callId, 0);
    await sim.deliver(hangupOf(a, 'timeout'));
    const b = await legAt(callId, 1);
    const answeredAt = new Date('2026-11-29T10:00:00.000Z');
    const answer = answerOf(b, answeredAt);
    await sim.deliver(answer);
    await sim.deliver(answer);
    await eventually(async () => (await getCall(callId)).status === 'in_progress');
    expect(await events(callId, 'call.answered')).toBe(1);

    const hangupAt = new Date(answeredAt.getTime() + 61_000);
    const hangup = hangupOf(b, 'normal_clearing', hangupAt);
    for (let i = 0; i < 3; i++) await sim.deliver(hangup);
    await eventually(async () => (await getCall(callId)).status === 'completed');
    await sim.deliver(hangupOf(a, 'timeout')); // late, under a new id
    await quiet();

    const call = await getCall(callId);
    expect(call).toMatchObject({
      status: 'completed',
      duration_seconds: 61,
      answered_at: answeredAt.toISOString(),
      ended_at: hangupAt.toISOString(),
    });
    expect(call.legs.map((l: { position: number; status: string }) => [l.position, l.status])).toEqual([
      [0, 'no_answer'],
      [1, 'completed'],
    ]);
    expect(await minutes(callId)).toEqual([2]);
    expect(await events(callId, 'call.completed')).toBe(1);
    expect(await events(callId, 'call.missed')).toBe(0);
    expect(await events(callId)).toBe(2); // answered, completed
    expect(dials() - before).toBe(2);
  });

  it('an answer racing a duplicate hangup of the previous leg dials nobody else', async () => {
    const before = dials();
    const callId = await place([A, B, C]);
    const a = await legAt(callId, 0);
    await sim.deliver(hangupOf(a, 'user_busy'));
    const b = await legAt(callId, 1);
    await Promise.all([
      sim.deliver(answerOf(b)),
      sim.deliver(hangupOf(a, 'user_busy')),
      sim.deliver(hangupOf(a, 'user_busy')),
      sim.deliver(answerOf(b)),
    ]);
    await quiet();
    expect((await getCall(callId)).status).toBe('in_progress');
    expect(dials() - before).toBe(2);
    expect(await count(db.pool, 'SELECT * FROM call_legs WHERE call_id = $1', [callId])).toBe(2);
    expect(await events(callId, 'call.answered')).toBe(1);
  });

  it('when every target times out (each hangup duplicated) the call is missed once, bills nothing, and dialed each target once', async () => {
    const before = dials();
    const callId = await place([A, B, C]);
    for (let p = 0; p < 3; p++) {
      const leg = await legAt(callId, p);
      const timeout = hangupOf(leg, 'timeout');
      await Promise.all([sim.deliver(timeout), sim.deliver(timeout), sim.deliver(hangupOf(leg, 'timeout'))]);
    }
    await eventually(async () => (await getCall(callId)).status === 'missed');
    await quiet();
    expect(dials() - before).toBe(3);
    expect(await events(callId, 'call.missed')).toBe(1);
    expect(await events(callId)).toBe(1);
    expect(await minutes(callId)).toEqual([]);
    expect((await getCall(callId)).duration_seconds).toBe(0);
  });

  it('a dial job re-run after the carrier accepted (crash before the commit) dials once: the repeated Idempotency-Key is answered with the first leg', async () => {
    const callId = await place([C]);
    const leg = await legAt(callId, 0);
    const before = dials(C);
    // The state a crash between the carrier's 200 and our commit leaves: the leg is still dialing.
    await db.pool.query(`UPDATE call_legs SET status = 'dialing', carrier_ref = NULL, dialed_at = NULL WHERE id = $1`, [
      leg.id,
    ]);
    const deps = {
      pool: db.pool,
      carriers: telnyxCarriers({ apiUrl: sim.url, apiKey: sim.apiKey, connectionId: 'conn-test' }),
      log: createLogger('silent'),
      policies: retryPolicies(3000),
    };
    expect(await dialLeg(deps, leg.id)).toBe('dialed');
    expect(dials(C)).toBe(before);
    expect(
      sim.requests.filter((r) => r.path === '/v2/calls' && r.idempotencyKey === leg.id && r.replayed),
    ).toHaveLength(1);
    const { rows } = await db.pool.query('SELECT carrier_ref, status FROM call_legs WHERE id = $1', [leg.id]);
    expect(rows[0]).toEqual({ carrier_ref: leg.carrier_ref, status: 'ringing' });
  });
});

describe('carrier legs racing our own decisions', () => {
  it('the dial job does not hang up the leg that answered while the dial request was in flight', async () => {
    sim.setWebhookUrl(null); // only the events this test writes
    sim.setBehaviour({ sendLatencyMs: 1500 });
    try {
      const mark = sim.requests.length;
      const callId = await place([A]);
      const leg = await eventually(
        async () =>
          (await db.pool.query('SELECT * FROM call_legs WHERE call_id = $1', [callId])).rows[0] as Leg | undefined,
      );
      await eventually(async () => sim.requests.some((r) => r.path === '/v2/calls' && r.commandId === leg.id)); // the dial is in flight
      const ccid = `v3:early-${randomUUID()}`;
      await sim.deliver(answerOf({ ...leg, carrier_ref: ccid }), `${platform.ingestUrl}/webhooks/telnyx`);
      await eventually(async () => (await getCall(callId)).status === 'in_progress');
      const dialed = await eventually(async () =>
        sim.requests.find((r) => r.path === '/v2/calls' && r.commandId === leg.id && r.status === 200),
      );
      await quiet();
      expect(dialed).toBeDefined();
      await new Promise((r) => setTimeout(r, 500)); // a hang-up command, if one was decided, has run by now
      expect(sim.requests.slice(mark).filter((r) => r.path.endsWith('/actions/hangup'))).toEqual([]);
      expect((await getCall(callId)).status).toBe('in_progress');
    } finally {
      sim.setBehaviour({ sendLatencyMs: 0 });
      sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
    }
  });

  it('a carrier leg for a dial we gave up on that answers anyway is hung up and changes nothing', async () => {
    const callId = await place([A, B]);
    const a = await legAt(callId, 0);
    // What dialLeg leaves after its attempts got no answer: the leg failed, never stamped.
    await db.pool.query(
      `UPDATE call_legs SET status = 'failed', ended_at = now(), hangup_cause = 'carrier_unavailable', carrier_ref = NULL WHERE id = $1`,
      [a.id],
    );
    await sim.deliver(answerOf(a)); // …but the carrier did place it, and the callee picked up
    await eventually(async () => actions(a.carrier_ref, 'hangup') === 1);
    await quiet();
    expect((await getCall(callId)).status).toBe('ringing');
    expect(await events(callId, 'call.answered')).toBe(0);
  });
});

describe('inbound', () => {
  it('call.initiated re-sent under a new id is one call; the caller hanging up mid-ring misses it and hangs up the ringing leg', async () => {
    const before = { a: dials(A), b: dials(B) };
    const inbound = sim.injectInboundCall({ from: '+14155550999', to: INBOUND_NUMBER });
    const callRow = await eventually(
      async () => (await db.pool.query('SELECT id FROM calls WHERE caller_ref = $1', [inbound.callControlId])).rows[0],
    );
    await sim.deliver(
      telnyxWebhook.callInitiated({
        callControlId: inbound.callControlId,
        callLegId: inbound.callLegId,
        callSessionId: inbound.callSessionId,
        from: '+14155550999',
        to: INBOUND_NUMBER,
        direction: 'incoming',
      }),
    );
    const a = await legAt(callRow.id, 0);
    await quiet();
    expect(await count(db.pool, 'SELECT * FROM calls WHERE caller_ref = $1', [inbound.callControlId])).toBe(1);
    expect(await events(callRow.id, 'call.initiated')).toBe(1);

    sim.hangup(inbound.callControlId); // the caller gives up
    await eventually(async () => (await getCall(callRow.id)).status === 'missed');
    await eventually(async () => actions(a.carrier_ref, 'hangup') === 1);
    await quiet();
    expect({ a: dials(A) - before.a, b: dials(B) - before.b }).toEqual({ a: 1, b: 0 });
    expect(await events(callRow.id, 'call.missed')).toBe(1);
    expect(await minutes(callRow.id)).toEqual([]);
    const call = await getCall(callRow.id);
    expect(call).toMatchObject({ direction: 'inbound', from: '+14155550999', number: INBOUND_NUMBER, to: [A, B] });
  });

  it('a ringing leg timing out after the caller hung up rings nobody else (the cursor moves only while the call rings)', async () => {
    const before = dials(B);
    const from = '+14155550980';
    const inbound = sim.injectInboundCall({ from, to: INBOUND_NUMBER });
    const callRow = await eventually(
      async () => (await db.pool.query('SELECT id FROM calls WHERE caller_ref = $1', [inbound.callControlId])).rows[0],
    );
    const a = await legAt(callRow.id, 0);
    await sim.deliver(
      telnyxWebhook.callHangup({
        callControlId: inbound.callControlId,
        callLegId: inbound.callLegId,
        from,
        to: INBOUND_NUMBER,
        hangupCause: 'normal_clearing',
        hangupSource: 'caller',
      }),
    );
    await eventually(async () => (await getCall(callRow.id)).status === 'missed');
    await sim.deliver(hangupOf(a, 'timeout')); // A's own timeout, processed after the call ended
    await quiet();
    expect(dials(B) - before).toBe(0);
    expect(await count(db.pool, 'SELECT * FROM call_legs WHERE call_id = $1', [callRow.id])).toBe(1);
    expect(await events(callRow.id, 'call.missed')).toBe(1);
  });

  it('the caller hanging up at the same moment the ringing leg times out: missed once, and a next leg dialed meanwhile is hung up', async () => {
    for (let round = 0; round < 4; round++) {
      const from = `+141555509${81 + round}`;
      const inbound = sim.injectInboundCall({ from, to: INBOUND_NUMBER });
      const callRow = await eventually(
        async () =>
          (await db.pool.query('SELECT id FROM calls WHERE caller_ref = $1', [inbound.callControlId])).rows[0],
      );
      const a = await legAt(callRow.id, 0);
      const callerGone = telnyxWebhook.callHangup({
        callControlId: inbound.callControlId,
        callLegId: inbound.callLegId,
        from,
        to: INBOUND_NUMBER,
        hangupCause: 'normal_clearing',
        hangupSource: 'caller',
      });
      await Promise.all([sim.deliver(callerGone), sim.deliver(hangupOf(a, 'timeout'))]);
      await eventually(async () => (await getCall(callRow.id)).status === 'missed');
      await quiet();
      expect(await events(callRow.id, 'call.missed')).toBe(1);
      const { rows: legs } = await db.pool.query('SELECT * FROM call_legs WHERE call_id = $1 ORDER BY position', [
        callRow.id,
      ]);
      expect(legs.length).toBeLessThanOrEqual(2);
      const b = legs[1];
      // If A's timeout won the race, B was claimed while the call still rang; the caller's
      // hangup then canceled it before its dial, or hung it up after.
      if (b?.carrier_ref) await eventually(async () => actions(b.carrier_ref, 'hangup') === 1);
      else if (b) expect(b.status).toBe('canceled');
    }
  });

  it('an answered target is bridged to the caller; the caller hanging up completes the call and hangs up the target', async () => {
    const inbound = sim.injectInboundCall({ from: '+14155550998', to: INBOUND_NUMBER });
    const callRow = await eventually(
      async () => (await db.pool.query('SELECT id FROM calls WHERE caller_ref = $1', [inbound.callControlId])).rows[0],
    );
    const a = await legAt(callRow.id, 0);
    await sim.deliver(hangupOf(a, 'timeout'));
    const b = await legAt(callRow.id, 1);
    sim.answer(b.carrier_ref);
    await eventually(async () => actions(inbound.callControlId, 'bridge') === 1);
    expect(actions(inbound.callControlId, 'answer')).toBe(1);
    const bridge = sim.requests.find((r) => r.path === `/v2/calls/${inbound.callControlId}/actions/bridge`)!;
    expect((bridge.body as { call_control_id: string }).call_control_id).toBe(b.carrier_ref);

    sim.hangup(inbound.callControlId);
    await eventually(async () => (await getCall(callRow.id)).status === 'completed');
    await eventually(async () => actions(b.carrier_ref, 'hangup') === 1);
    await quiet();
    expect(await events(callRow.id, 'call.completed')).toBe(1);
    expect((await minutes(callRow.id)).length).toBe(1);
  });

  it('an answer that loses (the caller already gave up) hangs that leg up instead and changes nothing', async () => {
    const inbound = sim.injectInboundCall({ from: '+14155550996', to: INBOUND_NUMBER });
    const callRow = await eventually(
      async () => (await db.pool.query('SELECT id FROM calls WHERE caller_ref = $1', [inbound.callControlId])).rows[0],
    );
    const a = await legAt(callRow.id, 0);
    sim.hangup(inbound.callControlId);
    await eventually(async () => (await getCall(callRow.id)).status === 'missed');
    await sim.deliver(answerOf(a)); // A picks up just too late
    await quiet();
    const call = await getCall(callRow.id);
    expect(call.status).toBe('missed');
    expect(call.answered_at).toBeNull();
    expect(await events(callRow.id, 'call.answered')).toBe(0);
    expect(actions(a.carrier_ref, 'hangup')).toBe(1); // once: the command_id de-duplicates the second decision
    expect(actions(inbound.callControlId, 'bridge')).toBe(0);
  });

  it('a caller whose hangup we never applied (given up on, or lost) is found gone when we answer them: the call ends, the leg that answered is hung up, nothing is bridged', async () => {
    const inbound = sim.injectInboundCall({ from: '+14155550995', to: INBOUND_NUMBER });
    const callRow = await eventually(
      async () => (await db.pool.query('SELECT id FROM calls WHERE caller_ref = $1', [inbound.callControlId])).rows[0],
    );
    const a = await legAt(callRow.id, 0);
    // The caller leaves, and their hangup never reaches a worker that can apply it.
    sim.setWebhookUrl(null);
    sim.hangup(inbound.callControlId);
    await sim.idle();
    sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
    sim.answer(a.carrier_ref);
    await eventually(async () => (await getCall(callRow.id)).status === 'completed');
    await eventually(async () => actions(a.carrier_ref, 'hangup') === 1);
    await quiet();
    expect(actions(inbound.callControlId, 'answer')).toBe(1);
    expect(actions(inbound.callControlId, 'bridge')).toBe(0);
    expect(await events(callRow.id, 'call.answered')).toBe(1);
    expect(await events(callRow.id, 'call.completed')).toBe(1);
  });

  it('a call to a number with no ring plan is rejected and missed', async () => {
    expect((await acme.post('/v1/phone_numbers', { number: '+13125550102' })).status).toBe(201);
    const inbound = sim.injectInboundCall({ from: '+14155550997', to: '+13125550102' });
    await eventually(async () => actions(inbound.callControlId, 'reject') === 1);
    const { rows } = await db.pool.query('SELECT id, status FROM calls WHERE caller_ref = $1', [inbound.callControlId]);
    expect(rows[0].status).toBe('missed');
    expect(await events(rows[0].id, 'call.missed')).toBe(1);
  });

  it('a call turned away for want of a ring plan is announced ringing at sequence 1, then missed at sequence 2', async () => {
    expect((await acme.post('/v1/phone_numbers', { number: '+13125550103' })).status).toBe(201);
    const inbound = sim.injectInboundCall({ from: '+14155550996', to: '+13125550103' });
    await eventually(async () => actions(inbound.callControlId, 'reject') === 1);
    const call = (await db.pool.query('SELECT id FROM calls WHERE caller_ref = $1', [inbound.callControlId])).rows[0];
    const { rows } = await db.pool.query<{ type: string; data: Record<string, unknown> }>(
      'SELECT type, data FROM outbound_events WHERE subject_id = $1 ORDER BY id',
      [call.id],
    );
    expect(rows.map((e) => [e.type, e.data['status'], e.data['sequence']])).toEqual([
      ['call.initiated', 'ringing', 1],
      ['call.missed', 'missed', 2],
    ]);
    expect((await getCall(call.id)).sequence).toBe(2);
  });
});

describe('bad input', () => {
  it.each([
    [{ from: OUR_NUMBER, to: [] }, 'invalid_ring_targets', 'to'],
    [{ from: OUR_NUMBER, to: Array.from({ length: 11 }, (_, i) => `+1415555030${i}`) }, 'invalid_ring_targets', 'to'],
    [{ from: OUR_NUMBER, to: ['+14155550201', '12345'] }, 'invalid_phone_number', 'to.1'],
    [{ from: '+14155559999', to: [A] }, 'from_not_owned', 'from'],
    [{ from: OUR_NUMBER, to: [A], ring_timeout_secs: 4 }, 'invalid_ring_timeout', 'ring_timeout_secs'],
    [{ from: OUR_NUMBER, to: [A], ring_timeout_secs: 121 }, 'invalid_ring_timeout', 'ring_timeout_secs'],
  ])('%o is 422 %s and creates nothing', async (body, code, param) => {
    const before = await count(db.pool, 'SELECT * FROM calls');
    const res = await acme.post('/v1/calls', body);
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ code, param });
    expect(await count(db.pool, 'SELECT * FROM calls')).toBe(before);
  });

  it("another account's call is 404 and absent from its list", async () => {
    const other = await createAccount(db.pool, platform.apiUrl!, 'Other');
    const callId = await place([C]);
    expect((await other.get(`/v1/calls/${callId}`)).status).toBe(404);
    expect((await other.get('/v1/calls')).json.data).toEqual([]);
    expect((await acme.get('/v1/calls?status=ringing')).json.data.some((c: { id: string }) => c.id === callId)).toBe(
      true,
    );
    expect((await acme.get('/v1/usage')).json.data).toEqual(
      expect.arrayContaining([expect.objectContaining({ kind: 'call_minute' })]),
    );
  });
});
