// The magic numbers and personas produce their events; call legs follow Telnyx's
// state machine under our commands (answer, hangup, reject, bridge, link_to) and
// the far end's (the control API's answer/hangup), echoing client_state.

import { describe, expect, test } from 'vitest';
import { useSimulator } from './harness.js';
import { telnyx, type Received } from './receiver.js';

const FROM = '+13125550001';

const h = useSimulator({ seed: 'personas' });

const payload = (r: Received) => r.json.data.payload;
const toStatus = (r: Received) => (payload(r)['to'] as Array<{ status: string }>)[0]!.status;
const ms = (iso: unknown) => Date.parse(String(iso));

/** The story of one message: "event_type:status[:error code]" in arrival order. */
async function smsStory(to: string): Promise<string[]> {
  const res = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to, text: 'Hello' });
  expect(res.status).toBe(200);
  await h.sim.idle();
  return h.rx.received
    .filter((r) => payload(r)['id'] === res.json.data.id)
    .map((r) => {
      const code = (payload(r)['errors'] as Array<{ code: string }>)[0]?.code;
      return [r.json.data.event_type, toStatus(r), ...(code ? [code] : [])].join(':');
    });
}

/** Dials and returns the story of the leg: "event_type[:hangup_cause:source]" in arrival order. */
async function dial(to: string, extra: object = {}) {
  const res = await telnyx(h.sim, 'POST', '/calls', { connection_id: '1684641123236054244', from: FROM, to, ...extra });
  expect(res.status).toBe(200);
  return res.json.data.call_control_id as string;
}

function legStory(id: string): string[] {
  return legEvents(id).map((r) =>
    r.json.data.event_type === 'call.hangup'
      ? `call.hangup:${payload(r)['hangup_cause']}:${payload(r)['hangup_source']}`
      : r.json.data.event_type,
  );
}

function legEvents(id: string): Received[] {
  return h.rx.received.filter((r) => payload(r)['call_control_id'] === id);
}

describe('SMS personas', () => {
  test.each([
    ['+15555550100', ['message.sent:sent', 'message.finalized:delivered']],
    ['+15555550101', ['message.sent:sent', 'message.finalized:delivery_failed:40008']],
    ['+15555550102', ['message.finalized:sending_failed:40001']],
    ['+15555550104', ['message.sent:sent', 'message.finalized:delivery_unconfirmed']],
    ['+15555550105', ['message.sent:sent']],
    ['+15555550106', ['message.finalized:expired:40014']],
    ['+14155550123', ['message.sent:sent', 'message.finalized:delivered']],
  ])('%s', async (to, story) => {
    expect(await smsStory(to)).toEqual(story);
  });

  test('+15555550103 is refused at send with 422 40310 and hears nothing', async () => {
    const res = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550103', text: 'Hello' });
    expect(res.status).toBe(422);
    expect(res.json.errors[0]).toMatchObject({ code: '40310' });
    await h.sim.idle();
    expect(h.rx.received).toHaveLength(0);
  });

  test('setPersona overrides a number, error code included, and reset() forgets it', async () => {
    h.sim.setPersona('+14155550123', { sms: 'delivery_failed', smsErrorCode: '40006' });
    expect(await smsStory('+14155550123')).toEqual(['message.sent:sent', 'message.finalized:delivery_failed:40006']);
    h.sim.reset();
    h.rx.received.length = 0;
    expect(await smsStory('+14155550123')).toEqual(['message.sent:sent', 'message.finalized:delivered']);
  });

  test("receipts are dated on the persona's schedule: sent 100 ms, finalized 1 s later", async () => {
    await smsStory('+15555550100');
    const [sent, finalized] = h.rx.received;
    expect(ms(payload(sent!)['sent_at']) - ms(payload(sent!)['received_at'])).toBe(100);
    expect(ms(finalized!.json.data.occurred_at) - ms(sent!.json.data.occurred_at)).toBe(1000);
    expect(payload(finalized!)['completed_at']).toBe(finalized!.json.data.occurred_at);
  });
});

describe('call personas', () => {
  test('any other number answers after 1 s and hangs up after 3 s of talk', async () => {
    const id = await dial('+14155550123');
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.answered', 'call.hangup:normal_clearing:callee']);
    const [initiated, answered, hangup] = legEvents(id);
    expect(ms(answered!.json.data.occurred_at) - ms(initiated!.json.data.occurred_at)).toBe(1000);
    expect(ms(payload(hangup!)['end_time']) - ms(answered!.json.data.occurred_at)).toBe(3000);
    expect(payload(hangup!)['start_time']).toBe(payload(initiated!)['start_time'] ?? initiated!.json.data.occurred_at);
    expect(payload(hangup!)['sip_hangup_cause']).toBe('200');
    expect(payload(hangup!)['call_quality_stats']).not.toBeNull();
  });

  test('+15555550110 never answers: timeout after timeout_secs', async () => {
    const id = await dial('+15555550110', { timeout_secs: 5 });
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.hangup:timeout:caller']);
    const [initiated, hangup] = legEvents(id);
    expect(ms(payload(hangup!)['end_time']) - ms(initiated!.json.data.occurred_at)).toBe(5000);
    expect(payload(hangup!)['call_quality_stats']).toBeNull();
  });

  test('a persona slower than timeout_secs times out too', async () => {
    h.sim.setPersona('+14155550199', { call: { answerAfterMs: 10_000 } });
    const id = await dial('+14155550199', { timeout_secs: 5 });
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.hangup:timeout:caller']);
  });

  test.each([
    ['+15555550111', 'call.hangup:user_busy:callee', '486'],
    ['+15555550112', 'call.hangup:call_rejected:callee', '603'],
  ])('%s refuses after 1 s', async (to, hangup, sip) => {
    const id = await dial(to);
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', hangup]);
    expect(payload(legEvents(id)[1]!)['sip_hangup_cause']).toBe(sip);
  });

  test('+15555550113 answers after 2 s and talks 5 s', async () => {
    const id = await dial('+15555550113');
    await h.sim.idle();
    const [initiated, answered, hangup] = legEvents(id);
    expect(legStory(id)).toEqual(['call.initiated', 'call.answered', 'call.hangup:normal_clearing:callee']);
    expect(ms(answered!.json.data.occurred_at) - ms(initiated!.json.data.occurred_at)).toBe(2000);
    expect(ms(hangup!.json.data.occurred_at) - ms(answered!.json.data.occurred_at)).toBe(5000);
  });

  test('+15555550114 answers and stays until we hang up', async () => {
    const id = await dial('+15555550114');
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.answered']);
    expect(h.sim.state().liveCalls).toMatchObject([{ call_control_id: id, state: 'answered' }]);
    await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, {});
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.answered', 'call.hangup:normal_clearing:caller']);
  });

  test('+15555550115 is manual: tests drive it with answer() and hangup()', async () => {
    const id = await dial('+15555550115');
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated']);
    h.sim.answer(id);
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.answered']);
    h.sim.hangup(id);
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.answered', 'call.hangup:normal_clearing:callee']);
    expect(() => h.sim.hangup(id)).toThrow(/already ended/);
    const declined = await dial('+15555550115');
    h.sim.hangup(declined, 'user_busy');
    await h.sim.idle();
    expect(legStory(declined)).toEqual(['call.initiated', 'call.hangup:user_busy:callee']);
  });

  test('hanging up a ringing leg is originator_cancel; the persona does nothing afterwards', async () => {
    // Slow enough (500 s simulated, 0.5 s real) that our hangup surely comes first.
    h.sim.setPersona('+14155550188', { call: { answerAfterMs: 500_000 } });
    const id = await dial('+14155550188', { timeout_secs: 600 });
    await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, {});
    await h.sim.idle();
    expect(legStory(id)).toEqual(['call.initiated', 'call.hangup:originator_cancel:caller']);
  });
});

describe('client_state', () => {
  test('every webhook of a leg echoes its client_state exactly; a command can replace it', async () => {
    const first = Buffer.from('{"call":"call_1","position":0}').toString('base64');
    const second = Buffer.from('{"call":"call_1","position":0,"ending":true}').toString('base64');
    const id = await dial('+15555550114', { client_state: first });
    await h.sim.idle();
    await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, { client_state: second });
    await h.sim.idle();
    expect(legEvents(id).map((r) => payload(r)['client_state'])).toEqual([first, first, second]);
    const plain = await dial('+15555550111');
    await h.sim.idle();
    expect(legEvents(plain).map((r) => payload(r)['client_state'])).toEqual([null, null]);
  });
});

describe('inbound calls and bridging', () => {
  test('an inbound call is parked; answer gives call.answered, the caller hanging up ends it', async () => {
    const inbound = h.sim.injectInboundCall({ from: '+18124040851', to: FROM });
    await h.sim.idle();
    expect(payload(legEvents(inbound.callControlId)[0]!)).toMatchObject({
      direction: 'incoming',
      state: 'parked',
      from: '+18124040851',
      to: FROM,
    });
    expect(legEvents(inbound.callControlId)[0]!.json.data.id).toBe(inbound.eventId);
    const answered = await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/answer`, {
      client_state: 'aGk=',
    });
    expect(answered.json).toEqual({ data: { result: 'ok' } });
    h.sim.hangup(inbound.callControlId);
    await h.sim.idle();
    expect(legStory(inbound.callControlId)).toEqual([
      'call.initiated',
      'call.answered',
      'call.hangup:normal_clearing:caller',
    ]);
  });

  test('the caller giving up while parked is originator_cancel; reject is call_rejected', async () => {
    const gaveUp = h.sim.injectInboundCall({ from: '+18124040851', to: FROM });
    h.sim.hangup(gaveUp.callControlId);
    const rejected = h.sim.injectInboundCall({ from: '+18124040852', to: FROM });
    await telnyx(h.sim, 'POST', `/calls/${rejected.callControlId}/actions/reject`, { cause: 'CALL_REJECTED' });
    const busy = h.sim.injectInboundCall({ from: '+18124040853', to: FROM });
    await telnyx(h.sim, 'POST', `/calls/${busy.callControlId}/actions/reject`, { cause: 'USER_BUSY' });
    await h.sim.idle();
    expect(legStory(gaveUp.callControlId)).toEqual(['call.initiated', 'call.hangup:originator_cancel:caller']);
    expect(legStory(rejected.callControlId)).toEqual(['call.initiated', 'call.hangup:call_rejected:callee']);
    expect(legStory(busy.callControlId)).toEqual(['call.initiated', 'call.hangup:user_busy:callee']);
  });

  test('link_to + bridge_on_answer bridges on answer; hanging up one leg leaves the other up', async () => {
    const inbound = h.sim.injectInboundCall({ from: '+18124040851', to: FROM });
    await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/answer`, {});
    const out = await dial('+15555550113', { link_to: inbound.callControlId, bridge_on_answer: true });
    await h.sim.idle();
    expect(legStory(out)).toEqual([
      'call.initiated',
      'call.answered',
      'call.bridged',
      'call.hangup:normal_clearing:callee',
    ]);
    expect(legStory(inbound.callControlId)).toEqual(['call.initiated', 'call.answered', 'call.bridged']);
    // link_to shares the session.
    expect(payload(legEvents(out)[0]!)['call_session_id']).toBe(
      payload(legEvents(inbound.callControlId)[0]!)['call_session_id'],
    );
    expect(h.sim.state().liveCalls).toMatchObject([
      { call_control_id: inbound.callControlId, state: 'answered', bridged_with: null },
    ]);
  });

  test('actions/bridge bridges two answered legs (call.bridged for both) and refuses a ringing one', async () => {
    const inbound = h.sim.injectInboundCall({ from: '+18124040851', to: FROM });
    await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/answer`, {});
    const out = await dial('+15555550115');
    const early = await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/bridge`, {
      call_control_id: out,
    });
    expect(early.status).toBe(422);
    expect(early.json.errors[0].code).toBe('90034');
    const missing = await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/bridge`, {});
    expect(missing.json.errors[0].code).toBe('10004');
    h.sim.answer(out);
    const bridged = await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/bridge`, {
      call_control_id: out,
      client_state: 'aGk=',
    });
    expect(bridged.json).toEqual({ data: { result: 'ok' } });
    await telnyx(h.sim, 'POST', `/calls/${out}/actions/hangup`, {});
    await h.sim.idle();
    expect(legStory(inbound.callControlId)).toEqual(['call.initiated', 'call.answered', 'call.bridged']);
    expect(payload(legEvents(inbound.callControlId)[2]!)['client_state']).toBe('aGk=');
    expect(legStory(out)).toEqual([
      'call.initiated',
      'call.answered',
      'call.bridged',
      'call.hangup:normal_clearing:caller',
    ]);
    const other = await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/bridge`, {
      call_control_id: out,
    });
    expect(other.json.errors[0].code).toBe('90018');
  });

  test('answering an outgoing leg or rejecting an answered one is a 422', async () => {
    const out = await dial('+15555550115');
    expect((await telnyx(h.sim, 'POST', `/calls/${out}/actions/answer`, {})).status).toBe(422);
    const inbound = h.sim.injectInboundCall({ from: '+18124040851', to: FROM });
    await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/answer`, {});
    expect((await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/reject`, {})).status).toBe(422);
    expect((await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/transfer`, { to: '+1' })).status).toBe(
      422,
    );
  });
});
