// Webhooks lost for good and webhooks held back: a dropped event makes not one
// attempt while its resource still moves at the carrier; a held one arrives late,
// overtaken by its resource's later events. Both come from the behaviour (rates,
// from the seed) or, deterministically, from the persona at the far end.

import { describe, expect, test } from 'vitest';
import { startSimulator, type Behaviour } from '../../src/sim/simulator.js';
import { useSimulator } from './harness.js';
import { startReceiver, telnyx, type Received } from './receiver.js';

const FROM = '+13125550001';
const PERSONA = '+14155550160';

const h = useSimulator({ seed: 'lost-and-held' });

const payload = (r: Received) => r.json.data.payload;
const typesOf = (key: string, id: string) =>
  h.rx.received.filter((r) => payload(r)[key] === id).map((r) => r.json.data.event_type);

async function sendSms(to: string) {
  const res = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to, text: 'Hello' });
  expect(res.status).toBe(200);
  return res.json.data.id as string;
}

async function dial(to: string, extra: object = {}) {
  const res = await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to, ...extra });
  expect(res.status).toBe(200);
  return res.json.data.call_control_id as string;
}

describe('dropped webhooks', () => {
  test('dropRate 1: not one attempt, yet the message is delivered at the carrier', async () => {
    h.sim.setBehaviour({ dropRate: 1 });
    const id = await sendSms('+15555550100');
    await h.sim.idle();
    expect(h.rx.received).toHaveLength(0);
    expect(h.sim.webhooks).toHaveLength(0);
    expect(h.sim.counts).toMatchObject({ events: 2, dropped: 2, attempts: 0 });
    expect(h.sim.dropped.map((d) => [d.eventType, d.reason, d.url])).toEqual([
      ['message.sent', 'behaviour', h.rx.url],
      ['message.finalized', 'behaviour', h.rx.url],
    ]);
    expect(JSON.parse(h.sim.dropped[1]!.body)).toMatchObject({
      data: { id: h.sim.dropped[1]!.eventId, payload: { id, to: [{ status: 'delivered' }] } },
      meta: { attempt: 1, delivered_to: h.rx.url },
    });
    const got = await telnyx(h.sim, 'GET', `/messages/${id}`);
    expect(got.json.data.to[0].status).toBe('delivered');
  });

  test('dropRates replaces dropRate for the types it names', async () => {
    h.sim.setBehaviour({ dropRate: 1, dropRates: { 'message.sent': 0 } });
    const id = await sendSms('+15555550100');
    await h.sim.idle();
    expect(typesOf('id', id)).toEqual(['message.sent']);
    h.sim.setBehaviour({ dropRate: 0, dropRates: { 'call.hangup': 1 } });
    const leg = await dial('+15555550100');
    await h.sim.idle();
    expect(typesOf('call_control_id', leg)).toEqual(['call.initiated', 'call.answered']);
    expect(h.sim.webhooks.some((w) => w.eventType === 'call.hangup')).toBe(false);
    expect(h.sim.state().liveCalls).toEqual([]);
  });

  test('a dropped event takes its copies with it', async () => {
    h.sim.setBehaviour({ dropRates: { 'message.finalized': 1 }, duplicateRate: 1, resendNewIdRate: 1 });
    const id = await sendSms('+15555550100');
    await h.sim.idle();
    expect(typesOf('id', id)).toEqual(['message.sent', 'message.sent', 'message.sent']);
    expect(h.sim.counts).toMatchObject({ dropped: 1, duplicates: 1, resends: 1 });
  });

  test('GET /_sim/dropped hands out the lost body, which can be delivered very late', async () => {
    h.sim.setPersona(PERSONA, { lose: ['message.finalized'] });
    const id = await sendSms(PERSONA);
    await h.sim.idle();
    const { json } = await h.control('GET', '/dropped');
    expect(json.data).toHaveLength(1);
    const lost = json.data[0];
    expect(lost).toMatchObject({ eventType: 'message.finalized', reason: 'persona', copy: 'original' });
    expect((await h.control('POST', '/deliver', { body: lost.body })).json).toEqual({ status: 200 });
    expect(h.rx.received.map((r) => [r.json.data.event_type, r.json.data.id])).toEqual([
      ['message.sent', expect.any(String)],
      ['message.finalized', lost.eventId],
    ]);
    expect(payload(h.rx.received[1]!)['id']).toBe(id);
    h.sim.reset();
    expect(h.sim.dropped).toHaveLength(0);
  });
});

describe('persona: lose', () => {
  test('the final hangup of an answered call is lost; the leg has ended all the same', async () => {
    h.sim.setPersona(PERSONA, { call: { answerAfterMs: 1000, talkMs: 3000 }, lose: ['call.hangup'] });
    const leg = await dial(PERSONA);
    await h.sim.idle();
    expect(typesOf('call_control_id', leg)).toEqual(['call.initiated', 'call.answered']);
    expect(h.sim.dropped.map((d) => [d.eventType, d.reason])).toEqual([['call.hangup', 'persona']]);
    const lost = JSON.parse(h.sim.dropped[0]!.body).data.payload;
    expect(lost).toMatchObject({ call_control_id: leg, hangup_cause: 'normal_clearing' });
    expect(h.sim.state().liveCalls).toEqual([]);
  });

  test('the timeout hangup of a ringing leg is lost', async () => {
    h.sim.setPersona(PERSONA, { call: { hangupCause: 'timeout' }, lose: ['call.hangup'] });
    const leg = await dial(PERSONA, { timeout_secs: 5 });
    await h.sim.idle();
    expect(typesOf('call_control_id', leg)).toEqual(['call.initiated']);
    const lost = JSON.parse(h.sim.dropped[0]!.body).data.payload;
    expect(lost).toMatchObject({ hangup_cause: 'timeout', hangup_source: 'caller' });
  });

  test('message.finalized is lost; message.sent still arrives', async () => {
    h.sim.setPersona(PERSONA, { sms: 'delivery_failed', lose: ['message.finalized'] });
    const id = await sendSms(PERSONA);
    await h.sim.idle();
    expect(typesOf('id', id)).toEqual(['message.sent']);
    const got = await telnyx(h.sim, 'GET', `/messages/${id}`);
    expect(got.json.data).toMatchObject({ to: [{ status: 'delivery_failed' }], errors: [{ code: '40008' }] });
  });

  test('inbound, the caller or sender is the far end: its hangup and message.received are lost', async () => {
    h.sim.setPersona(PERSONA, { lose: ['call.hangup', 'message.received'] });
    const inbound = h.sim.injectInboundCall({ from: PERSONA, to: FROM });
    h.sim.hangup(inbound.callControlId);
    const sms = h.sim.injectInboundSms({ from: PERSONA, to: FROM, text: 'hi' });
    await h.sim.idle();
    expect(h.rx.received.map((r) => r.json.data.event_type)).toEqual(['call.initiated']);
    expect(h.sim.dropped.map((d) => d.eventId)).toContain(sms.eventId);
  });
});

describe('held webhooks', () => {
  test('persona hold: call.answered arrives after the hangup of the same leg, its stamps unchanged', async () => {
    // Talks 3 s and holds the answer 50 s (simulated): the answer arrives ~47 s after the hangup.
    h.sim.setPersona(PERSONA, { call: { answerAfterMs: 1000, talkMs: 3000 }, hold: { 'call.answered': 50_000 } });
    const leg = await dial(PERSONA);
    await h.sim.idle();
    expect(typesOf('call_control_id', leg)).toEqual(['call.initiated', 'call.hangup', 'call.answered']);
    const [initiated, hangup, answered] = h.rx.received;
    const at = (r: Received) => Date.parse(r.json.data.occurred_at);
    expect(at(answered!) - at(initiated!)).toBe(1000);
    expect(at(hangup!) - at(answered!)).toBe(3000);
    expect(h.sim.counts).toMatchObject({ held: 1, dropped: 0 });
  });

  test('a held event leaves its lane, and its copies are held with it', async () => {
    h.sim.setBehaviour({ duplicateRate: 1 });
    h.sim.setPersona(PERSONA, { hold: { 'message.sent': 50_000 } });
    const id = await sendSms(PERSONA);
    await h.sim.idle();
    expect(typesOf('id', id)).toEqual(['message.finalized', 'message.finalized', 'message.sent', 'message.sent']);
  });

  test('holdRate 1: every event waits holdMinMs..holdMaxMs (real ms), here longer than the whole call', async () => {
    h.sim.setBehaviour({ holdRate: 1, holdMinMs: 300, holdMaxMs: 300 });
    await dial('+15555550100');
    // The leg has run its whole 4 s (4 ms real) course while its first webhook is still held.
    while (h.sim.state().liveCalls.length > 0) await new Promise((r) => setTimeout(r, 1));
    expect(h.rx.received).toHaveLength(0);
    await h.sim.idle();
    const types = h.rx.received.map((r) => r.json.data.event_type);
    expect(types).toEqual(['call.initiated', 'call.answered', 'call.hangup']);
    expect(h.sim.counts.held).toBe(3);
  });
});

describe('seed', () => {
  async function run(behaviour: Partial<Behaviour>) {
    const r = await startReceiver();
    const s = await startSimulator({ webhookUrl: r.url, timeScale: 0.001, seed: 'lost-and-held-replay', behaviour });
    const story: string[] = [];
    for (let i = 0; i < 12; i++) {
      const before = { dropped: s.counts.dropped, held: s.counts.held };
      await telnyx(s, 'POST', '/messages', { from: FROM, to: '+15555550100', text: `m${i}` });
      await s.idle();
      story.push(`dropped ${s.counts.dropped - before.dropped}, held ${s.counts.held - before.held}`);
    }
    await s.close();
    await r.close();
    return story;
  }

  test('the same seed drops and holds the same events', async () => {
    const knobs = { dropRate: 0.4, holdRate: 0.4, holdMinMs: 1, holdMaxMs: 5 };
    const a = await run(knobs);
    expect(await run(knobs)).toEqual(a);
    expect(new Set(a).size).toBeGreaterThan(1);
  });
});

describe('knobs and personas refuse bad input and change nothing', () => {
  test('behaviour', async () => {
    const unknown = await h.control('PUT', '/behaviour', { dropRates: { 'call.nope': 1 } });
    expect(unknown.json.error).toMatch(/unknown event type/);
    expect((await h.control('PUT', '/behaviour', { dropRates: { 'call.hangup': 2 } })).status).toBe(400);
    expect((await h.control('PUT', '/behaviour', { dropRates: 1 })).status).toBe(400);
    const upsideDown = await h.control('PUT', '/behaviour', { holdRate: 1, holdMinMs: 500, holdMaxMs: 100 });
    expect(upsideDown.json.error).toMatch(/holdMinMs/);
    expect(h.sim.behaviour).toMatchObject({ holdRate: 0, holdMinMs: 0, holdMaxMs: 0, dropRates: {} });
    const ok = await h.control('PUT', '/behaviour', { dropRates: { 'call.hangup': 1 }, holdMaxMs: 100 });
    expect(ok.json).toMatchObject({ dropRates: { 'call.hangup': 1 }, holdMaxMs: 100 });
  });

  test('personas', async () => {
    const number = encodeURIComponent(PERSONA);
    expect((await h.control('PUT', `/personas/${number}`, { lose: ['call.nope'] })).status).toBe(400);
    expect((await h.control('PUT', `/personas/${number}`, { lose: 'call.hangup' })).status).toBe(400);
    expect((await h.control('PUT', `/personas/${number}`, { hold: { 'call.answered': -1 } })).status).toBe(400);
    expect((await h.control('PUT', `/personas/${number}`, { hold: { nope: 1 } })).status).toBe(400);
    expect(h.sim.state().personas[PERSONA]).toBeUndefined();
    const put = await h.control('PUT', `/personas/${number}`, {
      lose: ['call.hangup'],
      hold: { 'call.answered': 8000 },
    });
    expect(put.json).toEqual({ number: PERSONA, persona: { lose: ['call.hangup'], hold: { 'call.answered': 8000 } } });
  });
});
