// Each misbehaviour knob, at rate 1, does what it says; retries look like Telnyx's;
// the same seed replays the same decisions. Counting happens at a local receiver.

import type { IncomingHttpHeaders } from 'node:http';
import { TelnyxWebhook } from 'telnyx/lib/webhooks';
import { describe, expect, test } from 'vitest';
import { startSimulator, type Behaviour } from '../../src/sim/simulator.js';
import { useSimulator } from './harness.js';
import { startReceiver, telnyx, type Received } from './receiver.js';

const FROM = '+13125550001';
const DELIVERED = '+15555550100';

const h = useSimulator({ seed: 'behaviour' });

async function sendSms(to = DELIVERED, extra: object = {}) {
  const res = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to, text: 'Hello', ...extra });
  return res;
}

function countBy<T>(items: T[], key: (t: T) => string): Map<string, number> {
  const m = new Map<string, number>();
  for (const i of items) m.set(key(i), (m.get(key(i)) ?? 0) + 1);
  return m;
}

const status = (r: Received) => (r.json.data.payload['to'] as Array<{ status: string }>)[0]!.status;
const messageId = (r: Received) => r.json.data.payload['id'] as string;

function headersOf(headers: IncomingHttpHeaders): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

describe('knobs at rate 1', () => {
  test('duplicateRate: every event arrives twice under the same id', async () => {
    h.sim.setBehaviour({ duplicateRate: 1 });
    for (let i = 0; i < 3; i++) await sendSms();
    await h.sim.idle();
    const byId = countBy(h.rx.received, (r) => r.json.data.id);
    expect(byId.size).toBe(6); // sent + finalized, three messages
    expect([...byId.values()]).toEqual([2, 2, 2, 2, 2, 2]);
    expect(h.sim.counts).toMatchObject({ events: 6, duplicates: 6, resends: 0 });
    expect(h.sim.webhooks.filter((w) => w.copy === 'duplicate')).toHaveLength(6);
  });

  test('resendNewIdRate: every fact arrives again under a new event id', async () => {
    h.sim.setBehaviour({ resendNewIdRate: 1 });
    for (let i = 0; i < 3; i++) await sendSms();
    h.sim.injectInboundSms({ from: '+13125550009', to: FROM, text: 'hi' });
    await h.sim.idle();
    expect(h.rx.received).toHaveLength(14);
    const facts = new Map<string, Set<string>>();
    for (const r of h.rx.received) {
      const fact = `${r.json.data.event_type}|${messageId(r)}`;
      facts.set(fact, (facts.get(fact) ?? new Set()).add(r.json.data.id));
    }
    expect(facts.size).toBe(7);
    for (const ids of facts.values()) expect(ids.size).toBe(2);
    // Same payload, same occurred_at: the same fact, only the event id differs.
    const received = h.rx.ofType('message.received');
    expect(received[0]!.json.data.payload).toEqual(received[1]!.json.data.payload);
    expect(received[0]!.json.data.occurred_at).toBe(received[1]!.json.data.occurred_at);
  });

  test('reorderWindowMs: receipts arrive out of order', async () => {
    h.sim.setBehaviour({ reorderWindowMs: 40 });
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await sendSms()).json.data.id);
    await h.sim.idle();
    const finalizedFirst = ids.filter((id) => {
      const order = h.rx.received.filter((r) => messageId(r) === id).map((r) => r.json.data.event_type);
      expect(order.sort()).toEqual(['message.finalized', 'message.sent']);
      return (
        h.rx.received.findIndex((r) => messageId(r) === id) ===
        h.rx.received.findIndex((r) => messageId(r) === id && r.json.data.event_type === 'message.finalized')
      );
    });
    expect(finalizedFirst.length).toBeGreaterThan(0);
  });

  test("without a reorder window one resource's events arrive in order", async () => {
    for (let i = 0; i < 10; i++) await sendSms();
    await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: '+15555550113' });
    await h.sim.idle();
    const types = (key: (r: Received) => unknown, id: unknown) =>
      h.rx.received.filter((r) => key(r) === id).map((r) => r.json.data.event_type);
    for (const id of new Set(
      h.rx.received.filter((r) => r.json.data.event_type.startsWith('message.')).map(messageId),
    )) {
      expect(types(messageId, id)).toEqual(['message.sent', 'message.finalized']);
    }
    expect(
      types(
        (r) => r.json.data.payload['call_control_id'],
        h.rx.ofType('call.initiated')[0]!.json.data.payload['call_control_id'],
      ),
    ).toEqual(['call.initiated', 'call.answered', 'call.hangup']);
  });

  test('contradictionRate: a delivered message is also reported delivery_failed, under a new id', async () => {
    h.sim.setBehaviour({ contradictionRate: 1 });
    const id = (await sendSms()).json.data.id;
    await h.sim.idle();
    const finals = h.rx.ofType('message.finalized');
    expect(finals.map(status)).toEqual(['delivered', 'delivery_failed']);
    expect(finals.every((r) => messageId(r) === id)).toBe(true);
    expect(new Set(finals.map((r) => r.json.data.id)).size).toBe(2);
    expect(finals[1]!.json.data.payload['errors']).toMatchObject([{ code: '40008' }]);
    // A failed message is never contradicted.
    h.rx.received.length = 0;
    await sendSms('+15555550101');
    await h.sim.idle();
    expect(h.rx.ofType('message.finalized').map(status)).toEqual(['delivery_failed']);
  });

  test('earlyReceiptRate: the receipts were answered before POST /v2/messages answers', async () => {
    h.sim.setBehaviour({ earlyReceiptRate: 1 });
    const res = await sendSms();
    // Nothing awaited in between: the receiver already holds both receipts.
    const seen = h.rx.received
      .filter((r) => messageId(r) === res.json.data.id)
      .map((r) => `${r.json.data.event_type}:${status(r)}`);
    expect(seen).toEqual(['message.sent:sent', 'message.finalized:delivered']);
    expect(res.json.data.to[0].status).toBe('queued');
  });

  test('sendLatencyMs: REST answers are held back', async () => {
    h.sim.setBehaviour({ sendLatencyMs: 30 });
    const started = performance.now();
    expect((await sendSms()).status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
  });

  test('rejectRate: sends and dials are refused with a 4xx and nothing happens', async () => {
    h.sim.setBehaviour({ rejectRate: 1 });
    const sms = await sendSms();
    expect(sms.status).toBe(403);
    expect(sms.json.errors[0]).toMatchObject({ code: '40300' });
    const dial = await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: DELIVERED });
    expect(dial.status).toBe(403);
    expect(dial.json.errors[0]).toMatchObject({ code: '10010' });
    await h.sim.idle();
    expect(h.rx.received).toHaveLength(0);
    expect(h.sim.counts).toMatchObject({ messages: 0, callLegs: 0 });
  });

  test('rateLimitRate: 429 with retry-after and error 10011', async () => {
    h.sim.setBehaviour({ rateLimitRate: 1 });
    for (const res of [
      await sendSms(),
      await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: DELIVERED }),
    ]) {
      expect(res.status).toBe(429);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(res.json).toEqual({
        errors: [
          {
            code: '10011',
            title: 'Too many requests',
            detail: 'You have exceeded the maximum number of allowed requests.',
          },
        ],
      });
    }
    expect(h.sim.counts).toMatchObject({ messages: 0, callLegs: 0 });
  });

  test('serverErrorRate: 500/503 with nothing done, so a retry with the same command_id dials', async () => {
    h.sim.setBehaviour({ serverErrorRate: 1 });
    const body = { connection_id: '1', from: FROM, to: '+15555550115', command_id: 'dial-1' };
    const failed = await telnyx(h.sim, 'POST', '/calls', body);
    expect([500, 503]).toContain(failed.status);
    expect(failed.json.errors[0]).toMatchObject({ code: '10007' });
    expect([500, 503]).toContain((await sendSms()).status);
    h.sim.setBehaviour({ serverErrorRate: 0 });
    const retried = await telnyx(h.sim, 'POST', '/calls', body);
    expect(retried.status).toBe(200);
    expect(h.sim.requests.at(-1)).toMatchObject({ commandId: 'dial-1', deduplicated: false, status: 200 });
    await h.sim.idle();
    expect(h.rx.ofType('call.initiated')).toHaveLength(1);
  });
});

describe('webhook delivery', () => {
  test('retries a 500 with the same data.id, attempt 1, 2, 3, each freshly signed', async () => {
    let n = 0;
    h.answer = () => (n++ < 2 ? 500 : 200);
    const id = (await sendSms('+15555550105')).json.data.id; // message.sent only
    await h.sim.idle();
    expect(h.rx.received.map((r) => [r.json.data.id, r.json.meta.attempt, r.json.meta.delivered_to, r.status])).toEqual(
      [
        [h.rx.received[0]!.json.data.id, 1, h.rx.url, 500],
        [h.rx.received[0]!.json.data.id, 2, h.rx.url, 500],
        [h.rx.received[0]!.json.data.id, 3, h.rx.url, 200],
      ],
    );
    expect(messageId(h.rx.received[0]!)).toBe(id);
    const verifier = new TelnyxWebhook(h.sim.publicKeyBase64);
    for (const r of h.rx.received) await expect(verifier.verify(r.raw, headersOf(r.headers))).resolves.toBeUndefined();
    expect(h.sim.webhooks.map((w) => [w.attempt, w.status])).toEqual([
      [1, 500],
      [2, 500],
      [3, 200],
    ]);
  });

  test('gives up after 3 attempts per URL; no answer counts as a failure', async () => {
    h.answer = () => 503;
    await sendSms('+15555550105');
    await h.sim.idle();
    expect(h.rx.received.map((r) => r.json.meta.attempt)).toEqual([1, 2, 3]);
    expect(h.sim.counts.failedDeliveries).toBe(1);
    // Each failed attempt counted by what came back: here three 503s.
    expect(h.sim.counts.failedAttempts).toEqual({ '503': 3 });
    h.sim.reset();
    h.sim.setWebhookUrl('http://127.0.0.1:9/nowhere');
    h.sim.injectInboundSms({ from: '+13125550009', to: FROM, text: 'hi' });
    await h.sim.idle();
    expect(h.sim.webhooks.map((w) => [w.attempt, w.status, w.error !== null])).toEqual([
      [1, null, true],
      [2, null, true],
      [3, null, true],
    ]);
    // No answer at all: counted by why there was none (fetch refuses port 9 outright), not as a status.
    expect(h.sim.counts.failedAttempts).toEqual({ 'bad port': 3 });
    h.sim.setWebhookUrl(h.rx.url);
  });

  test('a per-message webhook_url wins; its failover and the profile URL follow it', async () => {
    const own = await startReceiver(() => 500);
    const failover = await startReceiver();
    try {
      await sendSms('+15555550105', { webhook_url: own.url, webhook_failover_url: failover.url });
      await h.sim.idle();
      expect(own.received.map((r) => r.json.meta.attempt)).toEqual([1, 2, 3]);
      expect(failover.received.map((r) => [r.json.meta.attempt, r.json.meta.delivered_to])).toEqual([
        [4, failover.url],
      ]);
      expect(h.rx.received).toHaveLength(0);
      // use_profile_webhooks: false and no URL of its own: nobody hears about it.
      await sendSms('+15555550105', { use_profile_webhooks: false });
      await h.sim.idle();
      expect(h.rx.received).toHaveLength(0);
      expect(h.sim.counts.undeliverable).toBe(1);
    } finally {
      await own.close();
      await failover.close();
    }
  });

  test('a per-call webhook_url wins for every event of that leg', async () => {
    const own = await startReceiver();
    try {
      await telnyx(h.sim, 'POST', '/calls', {
        connection_id: '1',
        from: FROM,
        to: '+15555550111',
        webhook_url: own.url,
      });
      await h.sim.idle();
      expect(own.received.map((r) => r.json.data.event_type)).toEqual(['call.initiated', 'call.hangup']);
      expect(h.rx.received).toHaveLength(0);
    } finally {
      await own.close();
    }
  });
});

describe('seed', () => {
  async function run(seed: string, behaviour: Partial<Behaviour>) {
    const r = await startReceiver();
    const s = await startSimulator({ webhookUrl: r.url, timeScale: 0.001, seed, behaviour });
    // Per message, which copies of which events the carrier sent.
    const copies: string[] = [];
    for (let i = 0; i < 12; i++) {
      const before = s.webhooks.length;
      await telnyx(s, 'POST', '/messages', { from: FROM, to: DELIVERED, text: `m${i}` });
      await s.idle();
      copies.push(
        s.webhooks
          .slice(before)
          .map((w) => `${w.eventType}:${w.copy}`)
          .sort()
          .join(','),
      );
    }
    await s.close();
    await r.close();
    return copies;
  }

  test('the same seed replays the same rumours; another seed tells others', async () => {
    const knobs = { duplicateRate: 0.5, resendNewIdRate: 0.3, contradictionRate: 0.5 };
    const a = await run('replay-me', knobs);
    const b = await run('replay-me', knobs);
    const c = await run('something else', knobs);
    expect(a).toEqual(b);
    expect(c).not.toEqual(a);
    expect(a.some((x) => x.includes('duplicate'))).toBe(true);
    expect(a.some((x) => !x.includes('duplicate'))).toBe(true);
  });
});
