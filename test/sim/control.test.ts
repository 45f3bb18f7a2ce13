// The control API (/_sim) does what the programmatic API does; `handset sim`'s
// flags set the same knobs; idle() and reset() mean what they say; segments are
// counted like a carrier counts them.

import { EventEmitter } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { describe, expect, test } from 'vitest';
import { BEHAVIOUR_KEYS, knobFlag } from '../../src/sim/behaviour.js';
import { parseSimArgs, runSimCommand, SIM_USAGE } from '../../src/sim/cli.js';
import { segmentsOf } from '../../src/sim/segments.js';
import { useSimulator } from './harness.js';
import { startReceiver, telnyx } from './receiver.js';

const FROM = '+13125550001';

const h = useSimulator({ seed: 'control' });

describe('control API', () => {
  test('PUT /_sim/behaviour sets knobs and refuses bad ones', async () => {
    const ok = await h.control('PUT', '/behaviour', { duplicateRate: 1, reorderWindowMs: 5 });
    expect(ok.status).toBe(200);
    expect(ok.json).toMatchObject({ duplicateRate: 1, reorderWindowMs: 5, contradictionRate: 0 });
    expect(h.sim.behaviour.duplicateRate).toBe(1);
    expect((await h.control('PUT', '/behaviour', { duplicateRate: 2 })).status).toBe(400);
    expect((await h.control('PUT', '/behaviour', { loudness: 1 })).json.error).toMatch(/unknown knob/);
  });

  test('PUT /_sim/personas/{number} gives a number a persona', async () => {
    const put = await h.control('PUT', `/personas/${encodeURIComponent('+14155550123')}`, {
      sms: 'sent_only',
      call: { manual: true },
    });
    expect(put.status).toBe(200);
    expect((await h.control('PUT', '/personas/+14155550123', { sms: 'lost' })).status).toBe(400);
    expect((await h.control('PUT', '/personas/not-a-number', { sms: 'delivered' })).status).toBe(400);
    await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+14155550123', text: 'x' });
    await h.sim.idle();
    expect(h.rx.received.map((r) => r.json.data.event_type)).toEqual(['message.sent']);
  });

  test('POST /_sim/inbound/sms and /inbound/call, then answer and hang up through /_sim/calls', async () => {
    const sms = await h.control('POST', '/inbound/sms', {
      from: '+13125550009',
      to: FROM,
      text: 'hi',
      media_urls: ['https://example.com/cat.png'],
    });
    expect(sms.status).toBe(200);
    const call = await h.control('POST', '/inbound/call', { from: '+18124040851', to: FROM });
    expect(call.json.call_control_id).toMatch(/^v3:/);
    const out = await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: '+15555550115' });
    const id = out.json.data.call_control_id;
    expect((await h.control('POST', `/calls/${id}/answer`)).json).toEqual({ result: 'ok' });
    expect((await h.control('POST', `/calls/${id}/hangup`, { cause: 'normal_clearing' })).status).toBe(200);
    expect((await h.control('POST', `/calls/${call.json.call_control_id}/hangup`)).status).toBe(200);
    expect((await h.control('POST', `/calls/${id}/hangup`)).status).toBe(400);
    expect((await h.control('POST', '/inbound/sms', { from: 'me', to: FROM, text: 'x' })).status).toBe(400);
    await h.sim.idle();
    const received = h.rx.ofType('message.received')[0]!.json.data.payload;
    expect(received).toMatchObject({
      id: sms.json.message_id,
      type: 'MMS',
      media: [{ url: 'https://example.com/cat.png', content_type: 'image/png' }],
    });
    expect(h.rx.received.map((r) => r.json.data.event_type)).toEqual([
      'message.received',
      'call.initiated',
      'call.initiated',
      'call.answered',
      'call.hangup',
      'call.hangup',
    ]);
  });

  test('GET /_sim/state shows behaviour, personas, counts, live calls and recent traffic; POST /_sim/reset forgets', async () => {
    await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550100', text: 'x' });
    await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: '+15555550114' });
    await (await fetch(`${h.sim.controlUrl}/idle`)).json();
    const state = (await h.control('GET', '/state')).json;
    expect(state).toMatchObject({
      url: h.sim.url,
      publicKey: h.sim.publicKeyBase64,
      seed: 'control',
      webhookUrl: h.rx.url,
      counts: { requests: 2, messages: 1, callLegs: 1, events: 4, attempts: 4 },
      liveCalls: [{ to: '+15555550114', state: 'answered' }],
    });
    expect(state.personas['+15555550101']).toEqual({ sms: 'delivery_failed', smsErrorCode: '40008' });
    expect(state.recentRequests).toHaveLength(2);
    expect(state.recentWebhooks[0]).not.toHaveProperty('body');
    expect((await h.control('POST', '/reset')).json).toEqual({ result: 'ok' });
    expect((await h.control('GET', '/state')).json).toMatchObject({
      counts: { requests: 0, messages: 0, callLegs: 0 },
      liveCalls: [],
    });
  });

  test('PUT /_sim/webhook_url points the carrier elsewhere; POST /_sim/deliver sends a crafted body', async () => {
    const other = await startReceiver();
    try {
      expect((await h.control('PUT', '/webhook_url', { url: other.url })).json).toEqual({ webhookUrl: other.url });
      const body = JSON.stringify({
        data: { id: 'x', event_type: 'message.sent' },
        meta: { attempt: 1, delivered_to: other.url },
      });
      expect((await h.control('POST', '/deliver', { body })).json).toEqual({ status: 200 });
      expect(other.received.map((r) => r.raw)).toEqual([body]);
      expect((await h.control('PUT', '/webhook_url', { url: 'ftp://nope' })).status).toBe(400);
    } finally {
      h.sim.setWebhookUrl(h.rx.url);
      await other.close();
    }
  });
});

describe('idle and reset', () => {
  test("idle() waits for the carrier's pending timers", async () => {
    h.sim.setPersona('+14155550177', { call: { answerAfterMs: 50_000, talkMs: null } }); // 50 ms real
    await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: '+14155550177', timeout_secs: 600 });
    await h.sim.idle();
    expect(h.rx.received.map((r) => r.json.data.event_type)).toEqual(['call.initiated', 'call.answered']);
  });

  test('reset() cancels what is pending: a forgotten call never answers', async () => {
    h.sim.setPersona('+14155550177', { call: { answerAfterMs: 50_000 } });
    await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: '+14155550177', timeout_secs: 600 });
    h.sim.reset();
    await h.sim.idle();
    expect(h.sim.counts).toMatchObject({ requests: 0, callLegs: 0, events: 0 });
    // Past the moment the answer was due: it never comes.
    await new Promise((r) => setTimeout(r, 80));
    expect(h.rx.ofType('call.answered')).toHaveLength(0);
  });
});

describe('handset sim', () => {
  test('flags set the options and one flag per knob', () => {
    const { options, keyFile } = parseSimArgs([
      '--port',
      '0',
      '--webhook-url',
      'http://127.0.0.1:3999/webhooks/telnyx',
      '--seed',
      '7',
      '--time-scale',
      '0.5',
      '--duplicate-rate',
      '0.5',
      '--reorder-window-ms',
      '200',
      '--early-receipt-rate',
      '1',
      '--key-file',
      '/tmp/k.pem',
    ]);
    expect(options).toMatchObject({
      port: 0,
      webhookUrl: 'http://127.0.0.1:3999/webhooks/telnyx',
      seed: '7',
      timeScale: 0.5,
      behaviour: { duplicateRate: 0.5, reorderWindowMs: 200, earlyReceiptRate: 1 },
    });
    expect(keyFile).toBe('/tmp/k.pem');
    expect(parseSimArgs(['--webhook-url', '']).options.webhookUrl).toBeNull();
    expect(() => parseSimArgs(['--duplicate-rate', '2'])).toThrow(/between 0 and 1/);
    expect(() => parseSimArgs(['--bogus'])).toThrow();
  });

  test('the loss knobs have flags too: per-type rates as TYPE=P, a hold window that is not upside down', () => {
    const { options } = parseSimArgs([
      '--drop-rate',
      '0.1',
      '--drop-rates',
      'call.hangup=1,message.finalized=0.5',
      '--hold-rate',
      '0.2',
      '--hold-min-ms',
      '100',
      '--hold-max-ms',
      '900',
      '--answer-delay-ms',
      '1500',
      '--lost-answer-rate',
      '0.3',
      '--stalled-body-rate',
      '0.4',
    ]);
    expect(options.behaviour).toEqual({
      dropRate: 0.1,
      dropRates: { 'call.hangup': 1, 'message.finalized': 0.5 },
      holdRate: 0.2,
      holdMinMs: 100,
      holdMaxMs: 900,
      answerDelayMs: 1500,
      lostAnswerRate: 0.3,
      stalledBodyRate: 0.4,
    });
    expect(() => parseSimArgs(['--drop-rates', 'call.hangup'])).toThrow(/TYPE=P/);
    expect(() => parseSimArgs(['--drop-rates', 'call.nope=1'])).toThrow(/unknown event type/);
    expect(() => parseSimArgs(['--hold-min-ms', '10'])).toThrow(/holdMinMs/);
  });

  test('--help lists every knob and every event type', () => {
    for (const k of BEHAVIOUR_KEYS) expect(SIM_USAGE).toContain(`--${knobFlag(k)} `);
    expect(SIM_USAGE).toContain('call.hangup');
    for (const line of SIM_USAGE.split('\n')) expect(line.length).toBeLessThanOrEqual(120);
  });

  test('prints URL, key and public key, keeps its key file, and stops on SIGINT', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'handset-sim-'));
    const keyFile = path.join(dir, 'sim', 'key.pem');
    const log = pino({ enabled: false });
    try {
      const run = async () => {
        let out = '';
        const signals = new EventEmitter();
        const done = runSimCommand(['--port', '0', '--key-file', keyFile, '--rate-limit-rate', '1'], log, {
          stdout: { write: (t: string) => (out += t) },
          stderr: { write: () => true },
          signals: signals as never,
        });
        while (!out.includes('TELNYX_PUBLIC_KEY=')) await new Promise((r) => setTimeout(r, 5));
        const url = /TELNYX_API_URL=(\S+)/.exec(out)![1]!;
        const apiKey = /TELNYX_API_KEY=(\S+)/.exec(out)![1]!;
        const res = await telnyx({ url, apiKey }, 'POST', '/messages', { from: FROM, to: '+15555550100', text: 'x' });
        signals.emit('SIGINT');
        expect(await done).toBe(0);
        expect(out).toContain('rateLimitRate=1');
        return { status: res.status, publicKey: /TELNYX_PUBLIC_KEY=(\S+)/.exec(out)![1]! };
      };
      const first = await run();
      const second = await run();
      expect(first.status).toBe(429);
      expect(second.publicKey).toBe(first.publicKey);
      let err = '';
      expect(await runSimCommand(['--time-scale', '0'], log, { stderr: { write: (t: string) => (err += t) } })).toBe(2);
      expect(err).toContain('usage: handset sim');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('segments', () => {
  test.each([
    ['a'.repeat(160), 'GSM-7', 1],
    ['a'.repeat(161), 'GSM-7', 2],
    ['a'.repeat(306), 'GSM-7', 2],
    ['a'.repeat(307), 'GSM-7', 3],
    ['€'.repeat(80), 'GSM-7', 1],
    ['€'.repeat(81), 'GSM-7', 2],
    ['ж'.repeat(70), 'UCS-2', 1],
    ['ж'.repeat(71), 'UCS-2', 2],
    ['😀' + 'a'.repeat(68), 'UCS-2', 1],
    ['😀' + 'a'.repeat(69), 'UCS-2', 2],
  ])('%#: %s', (text, encoding, parts) => {
    expect(segmentsOf(text, false)).toEqual({ encoding, parts });
  });
});
