// What a client asks when a webhook never came: GET /v2/calls/{id} (Telnyx's
// "Retrieve a call status") and GET /v2/messages/{id} answer from the carrier's
// own state, agree to the microsecond with the webhooks that were sent, tell the
// truth about the ones that were lost, and a call's status is kept 10 minutes
// of wall-clock time.

import Telnyx from 'telnyx';
import { describe, expect, test } from 'vitest';
import { useSimulator } from './harness.js';
import { telnyx, type Received } from './receiver.js';

const FROM = '+13125550001';
const PERSONA = '+14155550170';
const VOICE_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/;
const STATUS_KEYS = [
  'call_control_id',
  'call_leg_id',
  'call_session_id',
  'client_state',
  'is_alive',
  'start_time',
  'end_time',
  'call_duration',
  'record_type',
];

const h = useSimulator({ seed: 'lookups' });

const payload = (r: Received) => r.json.data.payload;
const legEvent = (id: string, type: string) =>
  h.rx.received.find((r) => r.json.data.event_type === type && payload(r)['call_control_id'] === id);

/** A voice timestamp in whole microseconds since the epoch. */
function micros(iso: unknown): number {
  const m = /^(.*\.\d{3})(\d{3})Z$/.exec(String(iso));
  expect(m, `a voice timestamp: ${String(iso)}`).not.toBeNull();
  return Date.parse(`${m![1]}Z`) * 1000 + Number(m![2]);
}

async function dial(to: string, extra: object = {}) {
  const res = await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to, ...extra });
  expect(res.status).toBe(200);
  return res.json.data.call_control_id as string;
}

const lookup = (id: string) => telnyx(h.sim, 'GET', `/calls/${id}`);

describe('GET /v2/calls/{call_control_id}', () => {
  test('an ended call: the exact stamps of its webhooks, and the seconds it was connected', async () => {
    // Answers after 1.5 s, talks 61.25 s: 62 whole seconds rounded up, two billed minutes either way.
    h.sim.setPersona(PERSONA, { call: { answerAfterMs: 1500, talkMs: 61_250 } });
    const id = await dial(PERSONA, { client_state: 'aGk=' });
    await h.sim.idle();
    const res = await lookup(id);
    expect(res.status).toBe(200);
    expect(Object.keys(res.json)).toEqual(['data']);
    const status = res.json.data;
    expect(Object.keys(status)).toEqual(STATUS_KEYS);
    const hangup = payload(legEvent(id, 'call.hangup')!);
    const answered = legEvent(id, 'call.answered')!;
    expect(status).toEqual({
      call_control_id: id,
      call_leg_id: hangup['call_leg_id'],
      call_session_id: hangup['call_session_id'],
      client_state: 'aGk=',
      is_alive: false,
      start_time: hangup['start_time'],
      end_time: hangup['end_time'],
      call_duration: 62,
      record_type: 'call',
    });
    expect(status.start_time).toBe(legEvent(id, 'call.initiated')!.json.data.occurred_at);
    expect(status.start_time).toMatch(VOICE_TIME);
    const connected = micros(status.end_time) - micros(answered.json.data.occurred_at);
    expect(status.call_duration).toBe(Math.ceil(connected / 1e6));
    // The answer a client derives from the lookup is within a second of the real one, never after it.
    const derivedAnswer = micros(status.end_time) - status.call_duration * 1e6;
    const realAnswer = micros(answered.json.data.occurred_at);
    expect(realAnswer - derivedAnswer).toBeGreaterThanOrEqual(0);
    expect(realAnswer - derivedAnswer).toBeLessThan(1e6);
  });

  test('a leg never answered lasted 0 seconds; its end_time is its timeout hangup', async () => {
    const id = await dial('+15555550110', { timeout_secs: 5 });
    await h.sim.idle();
    const status = (await lookup(id)).json.data;
    expect(status).toMatchObject({ is_alive: false, call_duration: 0, client_state: null });
    expect(status.end_time).toBe(payload(legEvent(id, 'call.hangup')!)['end_time']);
    expect(micros(status.end_time) - micros(status.start_time)).toBe(5_000_000);
  });

  test('a live leg is alive without an end_time: ringing 0 s, answered counting up', async () => {
    const ringing = await dial('+15555550115');
    const ringingStatus = (await lookup(ringing)).json.data;
    expect(ringingStatus).toMatchObject({ is_alive: true, call_duration: 0 });
    expect(ringingStatus).not.toHaveProperty('end_time');
    h.sim.answer(ringing);
    h.offsetMs = 10; // 10 s of the leg's (compressed) time
    const talking = (await lookup(ringing)).json.data;
    expect(talking).toMatchObject({ is_alive: true });
    expect(talking.call_duration).toBeGreaterThanOrEqual(10);
    expect(talking).not.toHaveProperty('end_time');
    await telnyx(h.sim, 'POST', `/calls/${ringing}/actions/hangup`, { client_state: 'Ynll' });
    expect((await lookup(ringing)).json.data).toMatchObject({ is_alive: false, client_state: 'Ynll' });
  });

  test('a lost hangup: no attempt at all, while the lookup says is_alive false', async () => {
    h.sim.setPersona(PERSONA, { call: { answerAfterMs: 1000, talkMs: 3000 }, lose: ['call.hangup'] });
    const id = await dial(PERSONA);
    await h.sim.idle();
    expect(h.sim.webhooks.filter((w) => w.eventType === 'call.hangup')).toEqual([]);
    const status = (await lookup(id)).json.data;
    expect(status).toMatchObject({ is_alive: false, call_duration: 3 });
    const lost = JSON.parse(h.sim.dropped[0]!.body).data.payload;
    expect(status.end_time).toBe(lost.end_time);
    expect(micros(status.end_time) - micros(legEvent(id, 'call.answered')!.json.data.occurred_at)).toBe(3_000_000);
  });

  test('an inbound leg can be looked up too', async () => {
    const inbound = h.sim.injectInboundCall({ from: '+18124040851', to: FROM });
    await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/answer`, {});
    h.sim.hangup(inbound.callControlId);
    await h.sim.idle();
    const status = (await lookup(inbound.callControlId)).json.data;
    expect(status).toMatchObject({
      call_control_id: inbound.callControlId,
      call_leg_id: inbound.callLegId,
      is_alive: false,
    });
    expect(status.start_time).toBe(payload(legEvent(inbound.callControlId, 'call.initiated')!)['start_time']);
  });

  test('kept 10 minutes of wall-clock time after it ended, whatever the time scale, then refused like an unknown id', async () => {
    const id = await dial('+15555550111'); // busy after 1 s
    await h.sim.idle();
    const unknown = await lookup('v3:never-issued');
    expect(unknown.status).toBe(422);
    expect(unknown.json).toEqual((await telnyx(h.sim, 'POST', '/calls/v3:never-issued/actions/hangup', {})).json);
    expect(unknown.json.errors[0]).toMatchObject({ code: '90015', title: 'Invalid Call Control ID' });
    // 600 s of the leg's time later (timeScale 0.001): kept, where a retention in the leg's time forgot it.
    h.offsetMs = 601;
    expect((await lookup(id)).status).toBe(200);
    h.offsetMs = 599_000;
    expect((await lookup(id)).status).toBe(200);
    h.offsetMs = 601_000;
    const gone = await lookup(id);
    expect(gone.status).toBe(422);
    expect(gone.json).toEqual(unknown.json);
  });

  test('the official SDK reads it', async () => {
    const id = await dial('+15555550111');
    await h.sim.idle();
    const client = new Telnyx({ apiKey: h.sim.apiKey, baseURL: h.sim.url, maxRetries: 0 });
    const status = await client.calls.retrieveStatus(id);
    expect(status.data).toMatchObject({ call_control_id: id, is_alive: false, call_duration: 0, record_type: 'call' });
  });
});

describe('GET /v2/messages/{id}', () => {
  test('shows what the carrier knows, and agrees with the receipts to the millisecond', async () => {
    const ms = (iso: unknown) => Date.parse(String(iso));
    // +15555550105: message.sent, never finalized.
    const only = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550105', text: 'Hello' });
    await h.sim.idle();
    const sentOnly = (await telnyx(h.sim, 'GET', `/messages/${only.json.data.id}`)).json.data;
    const sentReceipt = h.rx.received.find((r) => payload(r)['id'] === only.json.data.id)!;
    expect(sentOnly).toMatchObject({ to: [{ status: 'sent' }], completed_at: null, errors: [] });
    expect(ms(sentOnly.sent_at)).toBe(ms(payload(sentReceipt)['sent_at']));

    const sent = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550101', text: 'Hello' });
    await h.sim.idle();
    const got = (await telnyx(h.sim, 'GET', `/messages/${sent.json.data.id}`)).json.data;
    const finalized = h.rx.received.find((r) => r.json.data.event_type === 'message.finalized')!;
    expect(got.to[0].status).toBe('delivery_failed');
    expect(ms(got.sent_at)).toBe(ms(payload(finalized)['sent_at']));
    expect(ms(got.completed_at)).toBe(ms(payload(finalized)['completed_at']));
    expect(got.errors).toEqual(payload(finalized)['errors']);
  });

  test('a lost receipt does not hide the outcome: sending_failed, with its error, and no webhook at all', async () => {
    h.sim.setBehaviour({ dropRate: 1 });
    const sent = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550102', text: 'Hello' });
    await h.sim.idle();
    expect(h.rx.received).toHaveLength(0);
    const got = (await telnyx(h.sim, 'GET', `/messages/${sent.json.data.id}`)).json.data;
    expect(got).toMatchObject({ to: [{ status: 'sending_failed' }], sent_at: null, errors: [{ code: '40001' }] });
    expect(got.completed_at).not.toBeNull();
  });

  test('a contradiction is a rumour: the carrier still knows the message as delivered', async () => {
    h.sim.setBehaviour({ contradictionRate: 1 });
    const sent = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550100', text: 'Hello' });
    await h.sim.idle();
    expect((await telnyx(h.sim, 'GET', `/messages/${sent.json.data.id}`)).json.data.to[0].status).toBe('delivered');
  });
});
