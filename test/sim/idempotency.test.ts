// Idempotency-Key on POST /v2/messages and POST /v2/calls, with Telnyx's
// documented semantics, and the answers lost after the carrier acted (delayed,
// cut, stalled mid-body) that make a client retry with the same key: the retry
// is answered from the record and nothing happens twice.

import { describe, expect, test } from 'vitest';
import { startSimulator, type Behaviour } from '../../src/sim/simulator.js';
import { useSimulator } from './harness.js';
import { telnyx } from './receiver.js';

const FROM = '+13125550001';
const DAY_MS = 24 * 60 * 60 * 1000;

const h = useSimulator({ seed: 'idempotency' });

const SMS = JSON.stringify({ from: FROM, to: '+15555550100', text: 'Hello' });
const DIAL = JSON.stringify({ connection_id: '1', from: FROM, to: '+15555550115' });

/** A raw POST: the body goes byte for byte as given. */
function post(path: string, body: string, key?: string, signal?: AbortSignal) {
  return fetch(`${h.sim.url}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${h.sim.apiKey}`,
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
    },
    body,
    ...(signal ? { signal } : {}),
  });
}

async function send(path: string, body: string, key?: string) {
  const res = await post(path, body, key);
  return { status: res.status, json: (await res.json()) as any };
}

const records = (path: string) =>
  h.sim.requests.filter((r) => r.path === path).map((r) => [r.idempotencyKey, r.replayed, r.status, r.answer]);

describe('Idempotency-Key', () => {
  test('the same key and body is answered from the record: one message, one set of webhooks', async () => {
    const first = await send('/messages', SMS, 'msg_1');
    const second = await send('/messages', SMS, 'msg_1');
    expect(first.status).toBe(200);
    expect(second).toEqual(first);
    await h.sim.idle();
    expect(h.sim.counts).toMatchObject({ messages: 1, replays: 1 });
    expect(h.rx.received.map((r) => r.json.data.event_type)).toEqual(['message.sent', 'message.finalized']);
    expect(records('/v2/messages')).toEqual([
      ['msg_1', false, 200, 'sent'],
      ['msg_1', true, 200, 'sent'],
    ]);
    // Another key is another send.
    expect((await send('/messages', SMS, 'msg_2')).json.data.id).not.toBe(first.json.data.id);
  });

  test('the busiest second is counted per sending number and in all, by arrival; a replay is not a message taken', async () => {
    // At the start of a second, so that the sends below fall in one.
    while (Date.now() % 1000 > 50) await new Promise((r) => setTimeout(r, 5));
    const other = JSON.stringify({ from: '+13125550002', to: '+15555550100', text: 'Hello' });
    const answers = await Promise.all([
      send('/messages', SMS, 'msg_a'),
      send('/messages', SMS, 'msg_b'),
      send('/messages', SMS, 'msg_c'),
      send('/messages', other, 'msg_d'),
    ]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    expect((await send('/messages', SMS, 'msg_a')).status).toBe(200);
    expect(h.sim.counts).toMatchObject({
      replays: 1,
      busiestSecond: 4,
      busiestSecondByNumber: { [FROM]: 3, '+13125550002': 1 },
    });
  });

  test('a dial replayed with its key dials once', async () => {
    const first = await send('/calls', DIAL, 'leg_1');
    const second = await send('/calls', DIAL, 'leg_1');
    expect(second).toEqual(first);
    await h.sim.idle();
    expect(h.sim.counts).toMatchObject({ callLegs: 1, replays: 1 });
    expect(h.rx.ofType('call.initiated')).toHaveLength(1);
  });

  test('the same key with a body not byte-for-byte the same is 422 and sends nothing', async () => {
    await send('/messages', SMS, 'msg_1');
    const reordered = JSON.stringify({ to: '+15555550100', from: FROM, text: 'Hello' });
    for (const body of [reordered, `${SMS} `, JSON.stringify({ from: FROM, to: '+15555550100', text: 'Hello!' })]) {
      const res = await send('/messages', body, 'msg_1');
      expect(res.status).toBe(422);
      expect(res.json.errors[0]).toMatchObject({ code: '10015' });
    }
    // A query string is part of the request too.
    expect((await send('/messages?x=1', SMS, 'msg_1')).status).toBe(422);
    await h.sim.idle();
    expect(h.sim.counts.messages).toBe(1);
    // The record is per method and path: the same key on /v2/calls is its own record.
    expect((await send('/calls', DIAL, 'msg_1')).status).toBe(200);
  });

  test('a failed send is not stored: the retry with the same key is carried out', async () => {
    h.sim.setBehaviour({ serverErrorRate: 1 });
    expect([500, 503]).toContain((await send('/messages', SMS, 'msg_1')).status);
    h.sim.setBehaviour({ serverErrorRate: 0, rateLimitRate: 1 });
    expect((await send('/messages', SMS, 'msg_1')).status).toBe(429);
    h.sim.setBehaviour({ rateLimitRate: 0 });
    // A refusal is not stored either: the corrected body under the same key is a new request, not a 422.
    expect((await send('/messages', JSON.stringify({ from: FROM, text: 'x' }), 'msg_1')).status).toBe(422);
    const retried = await send('/messages', SMS, 'msg_1');
    expect(retried.status).toBe(200);
    expect(h.sim.counts).toMatchObject({ messages: 1, replays: 0 });
    expect(h.sim.requests.at(-1)).toMatchObject({ idempotencyKey: 'msg_1', replayed: false, status: 200 });
  });

  test('a replay of a stored success is a success, whatever the failure knobs say', async () => {
    const first = await send('/messages', SMS, 'msg_1');
    h.sim.setBehaviour({ serverErrorRate: 1, rateLimitRate: 1, rejectRate: 1 });
    expect(await send('/messages', SMS, 'msg_1')).toEqual(first);
    expect((await send('/messages', SMS)).status).toBe(429);
  });

  test('a malformed key is refused 400 before anything is done', async () => {
    for (const key of ['', 'has space', 'é', 'a'.repeat(256), 'semi;colon']) {
      const res = await send('/messages', SMS, key);
      expect(res.status, JSON.stringify(key)).toBe(400);
      expect(res.json.errors[0]).toMatchObject({ code: '10015' });
    }
    expect(h.sim.counts.messages).toBe(0);
    expect((await send('/messages', SMS, `v3:${'a_-:9'.repeat(50)}x`.slice(0, 255))).status).toBe(200);
  });

  test('the same key while the first request is still in flight is 409', async () => {
    // Early receipts make the send wait for its webhooks' answers; the receiver is slow to give them.
    h.sim.setBehaviour({ earlyReceiptRate: 1 });
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    h.answer = async () => {
      await held;
      return 200;
    };
    const first = send('/messages', SMS, 'msg_1');
    // Accepted, and still waiting on its receipts' answers: in flight.
    while (h.sim.counts.messages === 0) await pause();
    const second = await send('/messages', SMS, 'msg_1');
    expect(second.status).toBe(409);
    expect(second.json.errors[0]).toMatchObject({ code: '10015' });
    release();
    expect((await first).status).toBe(200);
    expect((await send('/messages', SMS, 'msg_1')).json).toEqual((await first).json);
    expect(h.sim.counts.messages).toBe(1);
  });

  test('records are kept 24 hours of wall-clock time', async () => {
    const first = await send('/messages', SMS, 'msg_1');
    h.offsetMs = DAY_MS - 60_000;
    expect((await send('/messages', SMS, 'msg_1')).json).toEqual(first.json);
    h.offsetMs = DAY_MS + 60_000;
    const later = await send('/messages', SMS, 'msg_1');
    expect(later.status).toBe(200);
    expect(later.json.data.id).not.toBe(first.json.data.id);
    expect(h.sim.counts.messages).toBe(2);
  });
});

const pause = () => new Promise((r) => setTimeout(r, 1));

describe('answers lost after the carrier acted', () => {
  test('answerDelayMs: a client that gives up finds the send done; its retry gets the stored answer', async () => {
    h.sim.setBehaviour({ answerDelayMs: 400 });
    const gaveUp = await post('/messages', SMS, 'msg_1', AbortSignal.timeout(50)).catch((e: Error) => e);
    expect(gaveUp).toBeInstanceOf(Error);
    expect((gaveUp as Error).name).toBe('TimeoutError');
    // Carried out before the answer was even due.
    expect(h.sim.counts.messages).toBe(1);
    await h.sim.idle();
    const id = h.rx.ofType('message.sent')[0]!.json.data.payload['id'];
    h.sim.setBehaviour({ answerDelayMs: 0 });
    const retried = await send('/messages', SMS, 'msg_1');
    expect(retried.json.data.id).toBe(id);
    expect(h.sim.counts).toMatchObject({ messages: 1, replays: 1, answersDelayed: 1 });
    expect(records('/v2/messages')[0]).toEqual(['msg_1', false, 200, 'delayed']);
  });

  test('lostAnswerRate: the connection is cut after the message was accepted; the retry replays', async () => {
    h.sim.setBehaviour({ lostAnswerRate: 1 });
    const cut = await post('/messages', SMS, 'msg_1').catch((e: Error) => e);
    expect(cut).toBeInstanceOf(TypeError); // fetch failed: the other side closed
    expect(h.sim.counts).toMatchObject({ messages: 1, answersLost: 1 });
    expect(records('/v2/messages')).toEqual([['msg_1', false, 200, 'lost']]);
    h.sim.setBehaviour({ lostAnswerRate: 0 });
    const retried = await send('/messages', SMS, 'msg_1');
    expect(retried.status).toBe(200);
    await h.sim.idle();
    expect(h.rx.received.map((r) => r.json.data.payload['id'])).toEqual([retried.json.data.id, retried.json.data.id]);
    expect(h.sim.counts.messages).toBe(1);
  });

  test('lostAnswerRate on a dial: the leg rings all the same, and the retry gets its call_control_id', async () => {
    h.sim.setBehaviour({ lostAnswerRate: 1 });
    expect(await post('/calls', DIAL, 'leg_1').catch((e: Error) => e)).toBeInstanceOf(TypeError);
    h.sim.setBehaviour({ lostAnswerRate: 0 });
    const retried = await send('/calls', DIAL, 'leg_1');
    await h.sim.idle();
    expect(h.rx.ofType('call.initiated').map((r) => r.json.data.payload['call_control_id'])).toEqual([
      retried.json.data.call_control_id,
    ]);
    expect((await telnyx(h.sim, 'GET', `/calls/${retried.json.data.call_control_id}`)).json.data.is_alive).toBe(true);
  });

  test('stalledBodyRate: 200 and half a body that never ends, while the message exists (GET shows it)', async () => {
    h.sim.setBehaviour({ stalledBodyRate: 1 });
    const controller = new AbortController();
    const res = await post('/messages', SMS, 'msg_1', controller.signal);
    expect(res.status).toBe(200);
    expect(Number(res.headers.get('content-length'))).toBeGreaterThan(0);
    const reader = res.body!.getReader();
    const firstChunk = new TextDecoder().decode((await reader.read()).value);
    const id = /"id":"([0-9a-f-]{36})"/.exec(firstChunk)![1]!;
    let finished = false;
    const rest = reader.read().then(
      () => (finished = true),
      () => 'aborted',
    );
    const got = await telnyx(h.sim, 'GET', `/messages/${id}`);
    expect(got.status).toBe(200);
    expect(got.json.data.id).toBe(id);
    await h.sim.idle();
    expect(finished).toBe(false);
    expect(h.sim.counts).toMatchObject({ messages: 1, bodiesStalled: 1 });
    expect(records('/v2/messages')[0]).toEqual(['msg_1', false, 200, 'stalled']);
    controller.abort();
    expect(await rest).toBe('aborted');
    h.sim.setBehaviour({ stalledBodyRate: 0 });
    expect((await send('/messages', SMS, 'msg_1')).json.data.id).toBe(id);
  });

  test('reset() cuts an answer left stalled', async () => {
    h.sim.setBehaviour({ stalledBodyRate: 1 });
    const res = await post('/messages', SMS);
    const body = res.text().then(
      () => 'finished',
      () => 'cut',
    );
    h.sim.reset();
    expect(await body).toBe('cut');
  });

  test('the seed decides which answers are lost, not the timing', async () => {
    async function run(behaviour: Partial<Behaviour>) {
      const s = await startSimulator({ webhookUrl: null, timeScale: 0.001, seed: 'fates', behaviour });
      for (let i = 0; i < 12; i++) {
        await fetch(`${s.url}/messages`, {
          method: 'POST',
          headers: { authorization: `Bearer ${s.apiKey}`, 'content-type': 'application/json' },
          body: SMS,
          signal: AbortSignal.timeout(200),
        })
          .then((r) => r.body?.cancel())
          .catch(() => undefined);
        // The same requests in the same order: each one's receipts drawn before the next arrives.
        await s.idle();
      }
      const fates = s.requests.map((r) => r.answer);
      await s.close();
      return fates;
    }
    const knobs = { lostAnswerRate: 0.3, stalledBodyRate: 0.3 };
    const a = await run(knobs);
    expect(await run(knobs)).toEqual(a);
    expect(new Set(a)).toEqual(new Set(['sent', 'lost', 'stalled']));
  });
});
