// The simulator is byte-compatible with Telnyx: its webhooks
// verify with the official SDK, are canonically ordered and carry exactly the key
// sets of the reference fixtures; its REST answers have Telnyx's shapes, error
// bodies and codes; a repeated command_id within 60 s does nothing twice.

import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import Telnyx, { UnprocessableEntityError } from 'telnyx';
import { TelnyxWebhook } from 'telnyx/lib/webhooks';
import { describe, expect, test } from 'vitest';
import { parseTelnyxEvent } from '../../src/carrier/telnyx/events.js';
import { telnyxPublicKey, verifyTelnyxSignature } from '../../src/carrier/telnyx/signature.js';
import { canonicalJson, telnyxWebhook } from '../../src/sim/simulator.js';
import { useSimulator } from './harness.js';
import { telnyx, type Received } from './receiver.js';

const FROM = '+13125550001';
const MESSAGING_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$/;
const VOICE_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/;

const h = useSimulator({ seed: 'conformance' });

function fixture(name: string): unknown {
  return JSON.parse(readFileSync(new URL(`../fixtures/telnyx/${name}.json`, import.meta.url), 'utf8'));
}

/** Every key path of a JSON value; an array of objects contributes its first element's paths. */
function keyPaths(value: unknown, prefix = ''): string[] {
  if (Array.isArray(value)) return keyPaths(value[0], `${prefix}[]`);
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).flatMap(([k, v]) => [`${prefix}.${k}`, ...keyPaths(v, `${prefix}.${k}`)]);
  }
  return [];
}

function expectFixtureShape(delivery: Received | undefined, name: string) {
  expect(delivery, `a delivery shaped like ${name}`).toBeDefined();
  expect(keyPaths(delivery!.json).sort()).toEqual(keyPaths(fixture(name)).sort());
}

function headersOf(headers: IncomingHttpHeaders): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

/** Drives one of everything: outbound SMS delivered and failed, inbound SMS, outbound and inbound calls, a bridge. */
async function everything() {
  const delivered = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550100', text: 'Hello there!' });
  const failed = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550101', text: 'Hello there!' });
  h.sim.injectInboundSms({ from: '+13125550009', to: FROM, text: 'Hello from a phone' });
  const inbound = h.sim.injectInboundCall({ from: '+18124040851', to: FROM });
  await telnyx(h.sim, 'POST', `/calls/${inbound.callControlId}/actions/answer`, {});
  const dial = await telnyx(h.sim, 'POST', '/calls', {
    connection_id: '1684641123236054244',
    from: FROM,
    to: '+15555550113',
    client_state: 'aGF2ZSBhIG5pY2UgZGF5ID1d',
    link_to: inbound.callControlId,
    bridge_on_answer: true,
  });
  expect(delivered.status).toBe(200);
  expect(failed.status).toBe(200);
  expect(dial.status).toBe(200);
  await h.sim.idle();
  return {
    messageId: delivered.json.data.id as string,
    failedId: failed.json.data.id as string,
    inbound,
    dial: dial.json.data,
  };
}

describe('webhooks', () => {
  test('verify with the official SDK and our verifier, and are canonical Telnyx envelopes', async () => {
    await everything();
    // sent and finalized ×2, received, 2 × initiated, 2 × answered, 2 × bridged, 1 hangup (the caller stays)
    expect(h.rx.received).toHaveLength(12);
    const sdk = new TelnyxWebhook(h.sim.publicKeyBase64);
    const client = new Telnyx({ apiKey: 'unused', publicKey: h.sim.publicKeyBase64 });
    const ours = telnyxPublicKey(h.sim.publicKeyBase64);
    for (const d of h.rx.received) {
      await expect(sdk.verify(d.raw, headersOf(d.headers))).resolves.toBeUndefined();
      await expect(client.webhooks.unwrap(d.raw, { headers: headersOf(d.headers) })).resolves.toEqual(d.json);
      expect(verifyTelnyxSignature(ours, Buffer.from(d.raw), d.headers, Math.floor(Date.now() / 1000), 300)).toBeNull();
      expect(d.headers['content-type']).toBe('application/json');
      expect(d.headers['user-agent']).toBe('telnyx-webhooks');
      expect(d.headers['telnyx-signature-ed25519']).toMatch(/^[A-Za-z0-9+/]{86}==$/);
      expect(d.headers['telnyx-timestamp']).toMatch(/^\d{10}$/);
      // Keys sorted at every level, nulls explicit: the body is its own canonical form.
      expect(d.raw).toBe(canonicalJson(JSON.parse(d.raw)));
      expect(d.json.data.record_type).toBe('event');
      expect(d.json.meta).toEqual({ attempt: 1, delivered_to: h.rx.url });
      const time = d.json.data.event_type.startsWith('message.') ? MESSAGING_TIME : VOICE_TIME;
      expect(d.json.data.occurred_at).toMatch(time);
      // Our own parser reads every one of them.
      const parsed = parseTelnyxEvent(d.json);
      if (d.json.data.event_type !== 'call.bridged') expect(parsed.kind).not.toBe('unknown');
    }
  });

  test('a tampered body or a stale timestamp does not verify', async () => {
    await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550100', text: 'x' });
    await h.sim.idle();
    const d = h.rx.received[0]!;
    const sdk = new TelnyxWebhook(h.sim.publicKeyBase64);
    await expect(sdk.verify(d.raw.replace('"attempt":1', '"attempt":2'), headersOf(d.headers))).rejects.toThrow();
    const stale = { ...headersOf(d.headers), 'telnyx-timestamp': String(Number(d.headers['telnyx-timestamp']) - 301) };
    await expect(sdk.verify(d.raw, stale)).rejects.toThrow();
  });

  test('have exactly the key sets of the reference fixtures', async () => {
    const { messageId, failedId, inbound, dial } = await everything();
    const byMessage = (id: string, type: string, status?: string) =>
      h.rx.received.find(
        (d) =>
          d.json.data.event_type === type &&
          d.json.data.payload['id'] === id &&
          (status === undefined || (d.json.data.payload['to'] as Array<{ status: string }>)[0]?.status === status),
      );
    const byLeg = (ccid: string, type: string) =>
      h.rx.received.find((d) => d.json.data.event_type === type && d.json.data.payload['call_control_id'] === ccid);

    expectFixtureShape(byMessage(messageId, 'message.sent'), 'message-sent');
    expectFixtureShape(byMessage(messageId, 'message.finalized', 'delivered'), 'message-finalized-delivered');
    expectFixtureShape(byMessage(failedId, 'message.finalized', 'delivery_failed'), 'message-finalized-failed');
    expectFixtureShape(h.rx.ofType('message.received')[0], 'message-received');
    expectFixtureShape(byLeg(inbound.callControlId, 'call.initiated'), 'call-initiated-inbound');
    expectFixtureShape(byLeg(dial.call_control_id, 'call.initiated'), 'call-initiated-outbound');
    expectFixtureShape(byLeg(dial.call_control_id, 'call.answered'), 'call-answered');
    expectFixtureShape(byLeg(dial.call_control_id, 'call.hangup'), 'call-hangup');
    expectFixtureShape(byLeg(dial.call_control_id, 'call.bridged'), 'call-bridged');
    expectFixtureShape(byLeg(inbound.callControlId, 'call.bridged'), 'call-bridged');

    const failure = byMessage(failedId, 'message.finalized')!.json.data.payload;
    expect(failure['errors']).toEqual([
      {
        code: '40008',
        title: 'Undeliverable',
        detail: 'The carrier did not accept the message.',
        source: { pointer: '/to/0/phone_number' },
      },
    ]);
    const initiated = byLeg(dial.call_control_id, 'call.initiated')!.json.data.payload;
    expect(initiated).toMatchObject({
      direction: 'outgoing',
      state: 'bridging',
      client_state: 'aGF2ZSBhIG5pY2UgZGF5ID1d',
    });
    expect(byLeg(inbound.callControlId, 'call.initiated')!.json.data.payload).toMatchObject({
      direction: 'incoming',
      state: 'parked',
      client_state: null,
    });
  });

  test('the payload builders produce the same shapes, for tests to craft and replay', () => {
    const leg = { callControlId: 'v3:abc_-', from: FROM, to: '+15555550100' };
    const shapes: Array<[string, string]> = [
      [
        telnyxWebhook.messageReceived({
          from: '+13125550009',
          to: FROM,
          text: 'hi',
          webhookUrl: 'https://example.com/webhooks',
        }),
        'message-received',
      ],
      [telnyxWebhook.messageSent({ from: FROM, to: '+13125550002', text: 'hi' }), 'message-sent'],
      [
        telnyxWebhook.messageFinalized({ from: FROM, to: '+13125550002', text: 'hi', status: 'delivered' }),
        'message-finalized-delivered',
      ],
      [
        telnyxWebhook.messageFinalized({ from: FROM, to: '+13125550002', text: 'hi', status: 'delivery_failed' }),
        'message-finalized-failed',
      ],
      [telnyxWebhook.callInitiated({ ...leg, direction: 'incoming' }), 'call-initiated-inbound'],
      [telnyxWebhook.callInitiated(leg), 'call-initiated-outbound'],
      [telnyxWebhook.callAnswered(leg), 'call-answered'],
      [
        telnyxWebhook.callHangup({ ...leg, hangupCause: 'normal_clearing', answeredAt: Date.now() - 61_000 }),
        'call-hangup',
      ],
      [telnyxWebhook.callBridged(leg), 'call-bridged'],
    ];
    for (const [body, name] of shapes) {
      expect(keyPaths(JSON.parse(body)).sort(), name).toEqual(keyPaths(fixture(name)).sort());
      expect(body).toBe(canonicalJson(JSON.parse(body)));
    }
    const replay = telnyxWebhook.callHangup({
      ...leg,
      hangupCause: 'timeout',
      eventId: 'evt-1',
      attempt: 2,
      deliveredTo: 'http://x/y',
    });
    expect(JSON.parse(replay)).toMatchObject({
      data: { id: 'evt-1', payload: { hangup_cause: 'timeout', sip_hangup_cause: '487', call_quality_stats: null } },
      meta: { attempt: 2, delivered_to: 'http://x/y' },
    });
  });

  test('deliver() posts a crafted body, signed with a fresh timestamp, byte for byte', async () => {
    const body = telnyxWebhook.messageFinalized({
      from: FROM,
      to: '+13125550002',
      status: 'delivered',
      eventId: 'crafted-1',
    });
    expect(await h.sim.deliver(body)).toBe(200);
    expect(h.rx.received).toHaveLength(1);
    expect(h.rx.received[0]!.raw).toBe(body);
    await expect(
      new TelnyxWebhook(h.sim.publicKeyBase64).verify(body, headersOf(h.rx.received[0]!.headers)),
    ).resolves.toBeUndefined();
    expect(h.sim.webhooks.at(-1)).toMatchObject({ eventId: 'crafted-1', copy: 'manual', status: 200 });
  });
});

// The keys of the OpenAPI example response of POST /v2/messages .
const OUTBOUND_MESSAGE_KEYS = [
  'record_type',
  'direction',
  'id',
  'type',
  'messaging_profile_id',
  'organization_id',
  'from',
  'to',
  'cc',
  'text',
  'subject',
  'media',
  'webhook_url',
  'webhook_failover_url',
  'encoding',
  'parts',
  'tags',
  'cost',
  'cost_breakdown',
  'tcr_campaign_id',
  'tcr_campaign_billable',
  'tcr_campaign_registered',
  'received_at',
  'sent_at',
  'completed_at',
  'valid_until',
  'errors',
];

function expectTelnyxError(res: { status: number; json: any }, status: number, code: string) {
  expect(res.status).toBe(status);
  expect(Object.keys(res.json)).toEqual(['errors']);
  expect(res.json.errors).toHaveLength(1);
  const e = res.json.errors[0];
  expect(e.code).toBe(code);
  expect(typeof e.title).toBe('string');
  expect(typeof e.detail).toBe('string');
  for (const k of Object.keys(e)) expect(['code', 'title', 'detail', 'source']).toContain(k);
}

describe('REST', () => {
  test('POST /v2/messages answers an OutboundMessagePayload, queued, with parts and encoding computed', async () => {
    const res = await telnyx(h.sim, 'POST', '/messages', {
      from: FROM,
      to: '+15555550100',
      text: 'é'.repeat(10) + 'x'.repeat(151),
    });
    expect(res.status).toBe(200);
    expect(Object.keys(res.json)).toEqual(['data']);
    const m = res.json.data;
    expect(Object.keys(m)).toEqual(OUTBOUND_MESSAGE_KEYS);
    expect(m).toMatchObject({
      record_type: 'message',
      direction: 'outbound',
      type: 'SMS',
      encoding: 'GSM-7',
      parts: 2,
      from: { phone_number: FROM },
      to: [{ phone_number: '+15555550100', status: 'queued' }],
      webhook_url: h.rx.url,
      cost: { amount: '0.0102', currency: 'USD' },
      errors: [],
    });
    expect(m.id).toMatch(/^[0-9a-f-]{36}$/);
    const mms = await telnyx(h.sim, 'POST', '/messages', {
      from: FROM,
      to: '+15555550100',
      media_urls: ['https://example.com/a.png'],
    });
    expect(mms.json.data).toMatchObject({ type: 'MMS', parts: 1, media: [{ url: 'https://example.com/a.png' }] });
    const ucs2 = await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550100', text: '😀'.repeat(36) });
    expect(ucs2.json.data).toMatchObject({ encoding: 'UCS-2', parts: 2 });
    const got = await telnyx(h.sim, 'GET', `/messages/${m.id}`);
    expect(got.json.data.id).toBe(m.id);
  });

  test('messaging refusals carry Telnyx codes', async () => {
    expectTelnyxError(await telnyx(h.sim, 'POST', '/messages', { from: FROM, text: 'x' }), 422, '10004');
    const missing = await telnyx(h.sim, 'POST', '/messages', { from: FROM, text: 'x' });
    expect(missing.json.errors[0].source).toEqual({ pointer: '/to' });
    expectTelnyxError(
      await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '3125550002', text: 'x' }),
      422,
      '40310',
    );
    expectTelnyxError(
      await telnyx(h.sim, 'POST', '/messages', { from: 'not a sender!', to: '+13125550002', text: 'x' }),
      422,
      '40305',
    );
    expectTelnyxError(await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+13125550002' }), 422, '10004');
    expectTelnyxError(
      await telnyx(h.sim, 'POST', '/messages', { from: FROM, to: '+15555550103', text: 'x' }),
      422,
      '40310',
    );
    const unauthenticated = await fetch(`${h.sim.url}/messages`, {
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json' },
    });
    expectTelnyxError({ status: unauthenticated.status, json: await unauthenticated.json() }, 401, '10009');
    const badJson = await fetch(`${h.sim.url}/messages`, {
      method: 'POST',
      body: '{"to":',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${h.sim.apiKey}` },
    });
    expectTelnyxError({ status: badJson.status, json: await badJson.json() }, 400, '10015');
    expectTelnyxError(await telnyx(h.sim, 'GET', '/nothing/here'), 404, '10005');
    await h.sim.idle();
    expect(h.rx.received.map((r) => r.raw)).toEqual([]);
  });

  test('POST /v2/calls answers the dial shape and validates like Telnyx', async () => {
    const dial = await telnyx(h.sim, 'POST', '/calls', {
      connection_id: '7267',
      from: FROM,
      to: '+15555550115',
      client_state: 'aGk=',
    });
    expect(dial.status).toBe(200);
    expect(Object.keys(dial.json.data)).toEqual([
      'call_control_id',
      'call_leg_id',
      'call_session_id',
      'client_state',
      'is_alive',
      'record_type',
    ]);
    expect(dial.json.data).toMatchObject({ client_state: 'aGk=', is_alive: false, record_type: 'call' });
    expect(dial.json.data.call_control_id).toMatch(/^v3:[A-Za-z0-9_-]{54}$/);

    const base = { connection_id: '7267', from: FROM, to: '+15555550100' };
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, connection_id: undefined }), 422, '10004');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, to: undefined }), 422, '10004');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, to: '5550100' }), 422, '10016');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, from: 'anonymous' }), 422, '10016');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, timeout_secs: 4 }), 422, '10015');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, timeout_secs: 601 }), 422, '10015');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, client_state: 'not base64!' }), 422, '10015');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, bridge_on_answer: true }), 422, '10004');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls', { ...base, link_to: 'v3:nope' }), 422, '90015');
    expect(h.sim.counts.callLegs).toBe(1);
  });

  test('actions: {"data":{"result":"ok"}}, 90018 on an ended leg, 90015 on an unknown one, ":" in the path', async () => {
    const dial = await telnyx(h.sim, 'POST', '/calls', { connection_id: '7267', from: FROM, to: '+15555550115' });
    const id = dial.json.data.call_control_id as string;
    expect(id).toContain(':');
    const hangup = await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, {});
    expect(hangup.status).toBe(200);
    expect(hangup.json).toEqual({ data: { result: 'ok' } });
    expectTelnyxError(await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, {}), 422, '90018');
    expectTelnyxError(await telnyx(h.sim, 'POST', `/calls/${encodeURIComponent(id)}/actions/answer`, {}), 422, '90018');
    expectTelnyxError(await telnyx(h.sim, 'POST', '/calls/v3:abc_-/actions/hangup', {}), 422, '90015');
    const noBody = await fetch(`${h.sim.url}/calls/v3:abc_-/actions/hangup`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.sim.apiKey}` },
    });
    expect(noBody.status).toBe(422);
    await h.sim.idle();
    const hangups = h.rx.ofType('call.hangup');
    expect(hangups).toHaveLength(1);
    expect(hangups[0]!.json.data.payload).toMatchObject({
      hangup_cause: 'originator_cancel',
      hangup_source: 'caller',
      sip_hangup_cause: '487',
    });
  });

  test('the official SDK client works against it, errors included', async () => {
    const client = new Telnyx({ apiKey: h.sim.apiKey, baseURL: h.sim.url, maxRetries: 0 });
    const sent = await client.messages.send({ from: FROM, to: '+15555550100', text: 'from the SDK' });
    expect(sent.data?.to?.[0]?.status).toBe('queued');
    const dialed = await client.calls.dial({ connection_id: '7267', from: FROM, to: '+15555550115' });
    const id = dialed.data!.call_control_id;
    expect(await client.calls.actions.hangup(id, {})).toEqual({ data: { result: 'ok' } });
    const again = await client.calls.actions.hangup(id, {}).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(UnprocessableEntityError);
    expect((again as UnprocessableEntityError).error).toMatchObject({
      errors: [{ code: '90018', title: 'Call has already ended' }],
    });
  });
});

describe('command_id', () => {
  test('a dial repeated within 60 s is answered as the first and dials once; after 60 s it dials again', async () => {
    const body = { connection_id: '7267', from: FROM, to: '+15555550115', command_id: 'leg-1' };
    const first = await telnyx(h.sim, 'POST', '/calls', body);
    const second = await telnyx(h.sim, 'POST', '/calls', body);
    expect(second.status).toBe(200);
    expect(second.json).toEqual(first.json);
    expect(h.sim.requests.map((r) => [r.commandId, r.deduplicated, r.status])).toEqual([
      ['leg-1', false, 200],
      ['leg-1', true, 200],
    ]);
    h.offsetMs = 61_000;
    const third = await telnyx(h.sim, 'POST', '/calls', body);
    expect(third.json.data.call_control_id).not.toBe(first.json.data.call_control_id);
    await h.sim.idle();
    expect(h.rx.ofType('call.initiated')).toHaveLength(2);
    expect(h.sim.counts.callLegs).toBe(2);
  });

  test('an action repeated with its command_id is ignored, even after the leg ended', async () => {
    const dial = await telnyx(h.sim, 'POST', '/calls', { connection_id: '7267', from: FROM, to: '+15555550115' });
    const id = dial.json.data.call_control_id as string;
    const first = await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, { command_id: 'hangup-1' });
    const repeat = await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, { command_id: 'hangup-1' });
    expect([first.status, repeat.status]).toEqual([200, 200]);
    expect(repeat.json).toEqual({ data: { result: 'ok' } });
    expect(h.sim.requests.at(-1)).toMatchObject({ commandId: 'hangup-1', deduplicated: true, status: 200 });
    expectTelnyxError(
      await telnyx(h.sim, 'POST', `/calls/${id}/actions/hangup`, { command_id: 'hangup-2' }),
      422,
      '90018',
    );
    await h.sim.idle();
    expect(h.rx.ofType('call.hangup')).toHaveLength(1);
  });
});
