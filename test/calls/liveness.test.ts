// Calls when the carrier's words come late, out of order beyond any retry
// budget, or not at all. The carrier is the simulator, its webhooks captured by a
// receiver; the test decides when (and whether) each one is stored, and runs the
// processing job, the dial and the connect job by hand, with the clock as a
// parameter — so "processed 70 s before its answer" takes milliseconds, and every
// timestamp the call is billed from is the carrier's own.

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runAudit } from '../../src/audit/audit.js';
import { connectTask, dialLeg } from '../../src/calls/commands.js';
import { callHandlers } from '../../src/calls/handlers.js';
import { carrierEventStore } from '../../src/carrier/events.sql.js';
import { processCarrierEvent } from '../../src/carrier/process.js';
import { telnyxEnvelope } from '../../src/carrier/telnyx/events.js';
import { telnyxReconciled } from '../../src/carrier/telnyx/reconciled.js';
import { retryPolicies } from '../../src/jobs/retry.js';
import { messageHandlers } from '../../src/messages/receipts.js';
import type { Platform } from '../../src/platform.js';
import { lookupTask } from '../../src/reconcile/reconcile.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { startReceiver, type Receiver } from '../sim/receiver.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { telnyxCarriers } from '../support/carrier.js';

const OUR = '+13125550700';
const INBOUND = '+13125550701';
const B = '+14155550702';
const C = '+14155550703';
const ANSWERS_AND_STAYS = '+14155550704';
const log = createLogger('silent');
// The production bound: a 30 s crash-recovery bound, so a not-ready event waits at least 82 s.
const policies = retryPolicies(30_000);

let db: TestDatabase;
let sim: Simulator;
let rx: Receiver;
let platform: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  rx = await startReceiver();
  sim = await startSimulator({ webhookUrl: rx.url, seed: 'liveness', connectionId: 'conn-live' });
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
  acme = await createAccount(db.pool, platform.apiUrl!, 'Live');
  expect((await acme.post('/v1/phone_numbers', { number: OUR })).status).toBe(201);
  expect(
    (
      await acme.post('/v1/phone_numbers', {
        number: INBOUND,
        inbound_ring: [ANSWERS_AND_STAYS],
        ring_timeout_secs: 30,
      })
    ).status,
  ).toBe(201);
});
beforeEach(() => {
  sim.setPersona(B, { call: { manual: true } });
  sim.setPersona(C, { call: { manual: true } });
  sim.setPersona(ANSWERS_AND_STAYS, { call: { answerAfterMs: 300, talkMs: null } });
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await rx.close();
  await db.drop();
});

const carriers = () => telnyxCarriers({ apiUrl: sim.url, apiKey: sim.apiKey, connectionId: 'conn-live' });
const commandDeps = () => ({ pool: db.pool, carriers: carriers(), log, policies });
const reconcileDeps = () => ({
  pool: db.pool,
  carriers: carriers(),
  log,
  intervalMs: 60_000,
  afterMs: 60_000,
  messageAfterMs: 3_600_000,
});
/** One reconcile.lookup job run now, as the worker runs it. */
const lookUpNow = (target: Parameters<ReturnType<typeof lookupTask>>[0]['target']) =>
  lookupTask(reconcileDeps())(
    { target },
    { jobId: '1', attempts: 1, maxAttempts: 25, inSerialQueue: false, abortSignal: undefined },
  );
const processDeps = (now?: () => Date) => ({
  pool: db.pool,
  carriers: telnyxCarriers(),
  handlers: { ...messageHandlers, ...callHandlers },
  log,
  notReady: policies.notReady,
  ...(now ? { now } : {}),
});

/** The webhook the carrier sent about a leg, as captured (it reached nobody yet). */
const webhook = (type: string, ccid: string) =>
  eventually(async () =>
    rx.received.find((r) => r.json.data.event_type === type && r.json.data.payload['call_control_id'] === ccid),
  );

/** Stores a captured webhook the way ingest does; returns its row and when it was stored. */
async function store(raw: string): Promise<{ id: string; storedAt: Date }> {
  const e = telnyxEnvelope(JSON.parse(raw))!;
  const r = await carrierEventStore(db.pool, {
    carrier: 'telnyx',
    carrierEventId: e.eventId,
    eventType: e.eventType,
    subject: e.subject,
    rawJson: raw,
  });
  if (!r.stored) throw new Error('already stored');
  const { rows } = await db.pool.query('SELECT created_at FROM carrier_events WHERE id = $1', [r.id]);
  return { id: r.id, storedAt: rows[0].created_at };
}

const later = (from: Date, ms: number) => () => new Date(from.getTime() + ms);
const callOf = async (id: string) => (await acme.get(`/v1/calls/${id}`)).json;
const legRow = async (callId: string, position: number) =>
  (await db.pool.query('SELECT * FROM call_legs WHERE call_id = $1 AND position = $2', [callId, position])).rows[0];
const minutes = async (callId: string) =>
  (
    await db.pool.query(`SELECT quantity FROM usage_records WHERE source_id = $1 AND kind = 'call_minute'`, [callId])
  ).rows.map((r) => r.quantity);
const events = (callId: string, type: string) =>
  count(db.pool, 'SELECT * FROM outbound_events WHERE subject_id = $1 AND type = $2', [callId, type]);
const carrierSeconds = (fromIso: string, toIso: string) => Math.ceil((Date.parse(toIso) - Date.parse(fromIso)) / 1000);

describe('a hangup that overtakes its answer', () => {
  it('processed 70 s before the leg’s call.answered: the call completes, billed from the carrier’s times, and the next target is never dialed', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [B, C], ring_timeout_secs: 30 });
    expect(placed.status).toBe(201);
    const callId: string = placed.json.id;
    const leg0 = await legRow(callId, 0);
    expect(await dialLeg(commandDeps(), leg0.id)).toBe('dialed');
    const ccid: string = (await legRow(callId, 0)).carrier_ref;

    // At the carrier: B answers, talks, hangs up. Its answer is what reaches us last.
    sim.answer(ccid);
    await new Promise((r) => setTimeout(r, 1200));
    sim.hangup(ccid);
    const answered = await webhook('call.answered', ccid);
    const hangup = await webhook('call.hangup', ccid);

    const h = await store(hangup.raw);
    // However many times its job runs, and for 69 s, the hangup waits for the answer…
    expect(await processCarrierEvent(processDeps(later(h.storedAt, 0)), h.id, 1)).toBe('waiting');
    expect(await processCarrierEvent(processDeps(later(h.storedAt, 69_000)), h.id, 9)).toBe('waiting');
    expect((await callOf(callId)).status).toBe('ringing');
    // …which arrives 70 s after it.
    const a = await store(answered.raw);
    expect(await processCarrierEvent(processDeps(), a.id)).toBe('applied');
    expect(await processCarrierEvent(processDeps(later(h.storedAt, 70_000)), h.id, 10)).toBe('applied');

    const call = await callOf(callId);
    const talked = carrierSeconds(answered.json.data.occurred_at, hangup.json.data.payload['end_time'] as string);
    expect(call).toMatchObject({
      status: 'completed',
      answered_at: new Date(answered.json.data.occurred_at).toISOString(),
      duration_seconds: talked,
    });
    expect(await minutes(callId)).toEqual([Math.ceil(talked / 60)]);
    expect(await events(callId, 'call.answered')).toBe(1);
    expect(await events(callId, 'call.completed')).toBe(1);
    expect(await legRow(callId, 1)).toBeUndefined();
    expect(sim.requests.filter((r) => r.path === '/v2/calls' && (r.body as { to?: string }).to === C)).toHaveLength(0);
  });

  it('a hangup whose answer is stored but not yet applied waits past the time bound, as long as that answer waits', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [B, C], ring_timeout_secs: 30 });
    const callId: string = placed.json.id;
    expect(await dialLeg(commandDeps(), (await legRow(callId, 0)).id)).toBe('dialed');
    const ccid: string = (await legRow(callId, 0)).carrier_ref;
    sim.answer(ccid);
    sim.hangup(ccid, 'time_limit');
    const a = await store((await webhook('call.answered', ccid)).raw);
    const h = await store((await webhook('call.hangup', ccid)).raw);
    // The answer's worker crashed; an hour later the hangup still waits for it, whatever its cause says.
    expect(await processCarrierEvent(processDeps(later(h.storedAt, 3_600_000)), h.id, 50)).toBe('waiting');
    expect(await processCarrierEvent(processDeps(), a.id)).toBe('applied');
    expect(await processCarrierEvent(processDeps(later(h.storedAt, 3_600_000)), h.id, 51)).toBe('applied');
    expect((await callOf(callId)).status).toBe('completed');
    expect(await legRow(callId, 1)).toBeUndefined();
  });

  it('a hangup that rules an answer out (a timeout) rings on at once', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [B, C], ring_timeout_secs: 30 });
    const callId: string = placed.json.id;
    expect(await dialLeg(commandDeps(), (await legRow(callId, 0)).id)).toBe('dialed');
    const ccid: string = (await legRow(callId, 0)).carrier_ref;
    sim.hangup(ccid, 'timeout');
    const h = await store((await webhook('call.hangup', ccid)).raw);
    expect(await processCarrierEvent(processDeps(), h.id)).toBe('applied');
    expect((await legRow(callId, 1))?.status).toBe('dialing');
  });
});

describe('a connected hangup the carrier can no longer explain', () => {
  it('its answer lost for good and the carrier’s record gone: the call completes (it was picked up), no next target is dialed, and no minute it cannot prove is billed', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [B, C], ring_timeout_secs: 30 });
    const callId: string = placed.json.id;
    expect(await dialLeg(commandDeps(), (await legRow(callId, 0)).id)).toBe('dialed');
    const ccid: string = (await legRow(callId, 0)).carrier_ref;
    sim.answer(ccid);
    sim.hangup(ccid); // a normal clearing: connected
    const hangup = await webhook('call.hangup', ccid); // its call.answered never reaches us
    // By the time the hangup is applied the carrier keeps no record of the leg (here: an id it never issued).
    const forgotten = `v3:forgotten-${callId}`;
    await db.pool.query('UPDATE call_legs SET carrier_ref = $1 WHERE carrier_ref = $2', [forgotten, ccid]);
    const h = await store(hangup.raw.replaceAll(ccid, forgotten));

    // Past the wait, the hangup asks the carrier; the carrier cannot say; its own hangup decides.
    expect(await processCarrierEvent(processDeps(later(h.storedAt, 3_600_000)), h.id, 40)).toBe('waiting');
    const leg0 = await legRow(callId, 0);
    await lookUpNow({ kind: 'leg', legId: leg0.id });
    const { rows } = await db.pool.query('SELECT id FROM carrier_events WHERE carrier_event_id = $1', [
      `reconcile:${forgotten}:answered`,
    ]);
    expect(rows).toHaveLength(1);
    expect(await processCarrierEvent(processDeps(), rows[0].id)).toBe('applied');
    expect(await processCarrierEvent(processDeps(later(h.storedAt, 3_600_000)), h.id, 41)).toBe('applied');

    const call = await callOf(callId);
    expect(call).toMatchObject({ status: 'completed', duration_seconds: 0 });
    expect(call.ended_at).toBe(new Date(hangup.json.data.payload['end_time'] as string).toISOString());
    expect((await minutes(callId)).reduce((a: number, b: number) => a + b, 0)).toBe(0);
    expect(await legRow(callId, 1)).toBeUndefined();
    expect(await events(callId, 'call.completed')).toBe(1);
  });
});

describe('a ringing leg asked about while its answer waits to be applied', () => {
  it('the carrier’s record gone and its call.answered stored but not yet applied: nothing is concluded, the answer applies, and the next target is never dialed', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [B, C], ring_timeout_secs: 30 });
    const callId: string = placed.json.id;
    expect(await dialLeg(commandDeps(), (await legRow(callId, 0)).id)).toBe('dialed');
    const ccid: string = (await legRow(callId, 0)).carrier_ref;
    sim.answer(ccid);
    const answered = await webhook('call.answered', ccid);
    // The answer is stored, but its worker was cut off: not applied for a minute and more, past the
    // ring timeout, when reconciliation asks and the carrier keeps no record of the leg any more.
    const forgotten = `v3:forgotten-${callId}`;
    await db.pool.query(
      `UPDATE call_legs SET carrier_ref = $1, dialed_at = now() - interval '2 minutes' WHERE carrier_ref = $2`,
      [forgotten, ccid],
    );
    const a = await store(answered.raw.replaceAll(ccid, forgotten));
    await lookUpNow({ kind: 'leg', legId: (await legRow(callId, 0)).id });
    // No hangup guessed from "never answered, so ended by its ring timeout": the answer says otherwise.
    expect(
      await count(db.pool, 'SELECT * FROM carrier_events WHERE carrier_event_id = $1', [
        `reconcile:${forgotten}:hangup`,
      ]),
    ).toBe(0);
    expect(await processCarrierEvent(processDeps(), a.id)).toBe('applied');
    expect((await callOf(callId)).status).toBe('in_progress');
    expect(await legRow(callId, 1)).toBeUndefined();
    expect(await events(callId, 'call.missed')).toBe(0);
  });
});

describe('a guessed hangup and a late answer', () => {
  it('reconciliation’s "never answered" hangup, processed while the leg’s call.answered is stored: the answer goes first, the call completes, and the next target is never dialed', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [B, C], ring_timeout_secs: 30 });
    const callId: string = placed.json.id;
    expect(await dialLeg(commandDeps(), (await legRow(callId, 0)).id)).toBe('dialed');
    const leg0 = await legRow(callId, 0);
    const ccid: string = leg0.carrier_ref;
    sim.answer(ccid);
    const answered = await webhook('call.answered', ccid);
    // The carrier had forgotten the leg when asked, and no answer was stored yet: reconciliation
    // guessed it ended unanswered at its ring timeout. The answer arrives before that guess is applied.
    const endedAt = new Date(leg0.dialed_at.getTime() + 30_000);
    const [guess] = telnyxReconciled({
      kind: 'leg.ended',
      leg: { leg: ccid, echo: { c: callId, l: leg0.id, p: 0 }, from: OUR, to: B },
      connectedSeconds: 0,
      startedAt: leg0.dialed_at,
      endedAt,
    });
    const h = await store(guess!.rawJson);
    const a = await store(answered.raw);
    expect(await processCarrierEvent(processDeps(), h.id, 1)).toBe('waiting');
    expect(await processCarrierEvent(processDeps(), a.id)).toBe('applied');
    expect(await processCarrierEvent(processDeps(), h.id, 2)).toBe('applied');
    expect((await callOf(callId)).status).toBe('completed');
    expect(await legRow(callId, 1)).toBeUndefined();
    expect(await events(callId, 'call.missed')).toBe(0);
    expect(await events(callId, 'call.completed')).toBe(1);
    // The guess's end (its ring timeout, 30 s on) is no carrier's word on how long the call talked:
    // nothing it cannot prove is billed.
    expect(await callOf(callId)).toMatchObject({ duration_seconds: 0 });
    expect((await minutes(callId)).reduce((x: number, y: number) => x + y, 0)).toBe(0);
  });
});

describe('an inbound caller who gives up before their call is processed', () => {
  it('hangs up while call.initiated is delayed 60 s: the call is missed, no target is dialed, nothing is billed', async () => {
    const from = '+14155550790';
    const { callControlId } = sim.injectInboundCall({ from, to: INBOUND });
    const initiated = await webhook('call.initiated', callControlId);
    sim.hangup(callControlId);
    const hangup = await webhook('call.hangup', callControlId);

    const h = await store(hangup.raw);
    expect(await processCarrierEvent(processDeps(), h.id, 1)).toBe('ignored');
    expect(await count(db.pool, 'SELECT * FROM carrier_leg_endings WHERE carrier_ref = $1', [callControlId])).toBe(1);
    // Sixty seconds later the call.initiated is finally processed.
    const i = await store(initiated.raw);
    expect(await processCarrierEvent(processDeps(later(i.storedAt, 60_000)), i.id)).toBe('applied');

    const { rows } = await db.pool.query('SELECT * FROM calls WHERE from_number = $1', [from]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: 'missed', duration_seconds: 0 });
    expect(rows[0].ended_at.toISOString()).toBe(new Date(hangup.json.data.payload['end_time'] as string).toISOString());
    expect(await count(db.pool, 'SELECT * FROM call_legs WHERE call_id = $1', [rows[0].id])).toBe(0);
    expect(await minutes(rows[0].id)).toEqual([]);
    expect(await events(rows[0].id, 'call.initiated')).toBe(1);
    expect(await events(rows[0].id, 'call.missed')).toBe(1);
    // The caller is gone: nobody is told to reject them.
    expect(await count(db.pool, `SELECT * FROM graphile_worker.jobs WHERE key = $1`, [`reject:${callControlId}`])).toBe(
      0,
    );
  });
});

describe('two transitions of one call in one transaction', () => {
  it('a caller gone before call.initiated is processed: call.initiated carries the call ringing at sequence 1, call.missed the call missed at sequence 2', async () => {
    const from = '+14155550791';
    const { callControlId } = sim.injectInboundCall({ from, to: INBOUND });
    const initiated = await webhook('call.initiated', callControlId);
    sim.hangup(callControlId);
    const hangup = await webhook('call.hangup', callControlId);
    expect(await processCarrierEvent(processDeps(), (await store(hangup.raw)).id, 1)).toBe('ignored');
    expect(await processCarrierEvent(processDeps(), (await store(initiated.raw)).id)).toBe('applied');

    const call = (await db.pool.query('SELECT * FROM calls WHERE caller_ref = $1', [callControlId])).rows[0];
    const { rows } = await db.pool.query<{ id: string; type: string; data: Record<string, unknown> }>(
      'SELECT id, type, data FROM outbound_events WHERE subject_id = $1 ORDER BY id',
      [call.id],
    );
    expect(rows.map((e) => [e.type, e.data['status'], e.data['sequence'], e.data['ended_at']])).toEqual([
      ['call.initiated', 'ringing', 1, null],
      ['call.missed', 'missed', 2, new Date(hangup.json.data.payload['end_time'] as string).toISOString()],
    ]);
    expect(call).toMatchObject({ status: 'missed', sequence: 2 });
    // The audit's rule for invariant 11 finds nothing wrong with them.
    const report = await runAudit(db.pool, { sampleLimit: 1_000 });
    const sequences = report.checks.find((c) => c.key === 'events.sequence_increases')!;
    expect(sequences.sample.filter((id) => rows.some((e) => e.id === id))).toEqual([]);
  });
});

/** An inbound call answered by its target, as far as call.connect: returns the ids and the answer's webhook. */
async function answeredInbound(from: string) {
  const { callControlId: caller } = sim.injectInboundCall({ from, to: INBOUND });
  expect(
    await processCarrierEvent(processDeps(), (await store((await webhook('call.initiated', caller)).raw)).id),
  ).toBe('applied');
  const call = (await db.pool.query('SELECT * FROM calls WHERE caller_ref = $1', [caller])).rows[0];
  expect(await dialLeg(commandDeps(), (await legRow(call.id, 0)).id)).toBe('dialed');
  const target: string = (await legRow(call.id, 0)).carrier_ref;
  const answered = await webhook('call.answered', target);
  expect(await processCarrierEvent(processDeps(), (await store(answered.raw)).id)).toBe('applied');
  expect((await callOf(call.id)).status).toBe('in_progress');
  return { callId: call.id as string, caller, target, answered };
}

describe('call.connect finding the caller gone', () => {
  it('runs late and gets 90018: the call is billed exactly as if the caller’s hangup had arrived in order', async () => {
    const { callId, caller, answered } = await answeredInbound('+14155550791');
    // The caller hangs up; that webhook is lost. The connect job runs seconds later.
    sim.hangup(caller);
    const hangup = await webhook('call.hangup', caller);
    await new Promise((r) => setTimeout(r, 2500));
    await connectTask(commandDeps())(
      { callId },
      { jobId: '1', attempts: 1, maxAttempts: 25, inSerialQueue: false, abortSignal: undefined },
    );
    expect((await callOf(callId)).status).toBe('in_progress'); // nothing invented from our clock
    // The lookup it asked for learns the caller's end from the carrier.
    expect(
      await count(db.pool, `SELECT * FROM graphile_worker.jobs WHERE key = $1`, [`reconcile.lookup:caller:${callId}`]),
    ).toBe(1);
    await lookUpNow({ kind: 'caller', callId });
    const { rows } = await db.pool.query(`SELECT id FROM carrier_events WHERE carrier_event_id = $1`, [
      `reconcile:${caller}:hangup`,
    ]);
    expect(await processCarrierEvent(processDeps(), rows[0].id)).toBe('applied');

    const inOrder = carrierSeconds(answered.json.data.occurred_at, hangup.json.data.payload['end_time'] as string);
    const call = await callOf(callId);
    expect(call).toMatchObject({ status: 'completed', duration_seconds: inOrder });
    expect(await minutes(callId)).toEqual([Math.ceil(inOrder / 60)]);
    const c = (await db.pool.query('SELECT caller_reconciled FROM calls WHERE id = $1', [callId])).rows[0];
    expect(c.caller_reconciled).toBe(true);
  });

  it('a bridge refused with a 4xx other than "call ended" hangs up both parties instead of leaving them unbridged', async () => {
    const { callId, caller, target } = await answeredInbound('+14155550792');
    // The carrier no longer knows the answered leg under the id we hold.
    await db.pool.query(`UPDATE call_legs SET carrier_ref = 'v3:forgotten' WHERE carrier_ref = $1`, [target]);
    await connectTask(commandDeps())(
      { callId },
      { jobId: '3', attempts: 1, maxAttempts: 25, inSerialQueue: false, abortSignal: undefined },
    );
    const keys = (
      await db.pool.query(`SELECT key FROM graphile_worker.jobs WHERE task_identifier = 'call.command'`)
    ).rows.map((r) => r.key);
    expect(keys).toEqual(expect.arrayContaining([`hangup:${caller}`, 'hangup:v3:forgotten']));
  });
});
