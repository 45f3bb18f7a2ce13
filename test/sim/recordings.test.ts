// Call recording at the simulated carrier: record_start/record_stop under
// command_id de-duplication, call.recording.saved after the hangup with URLs to
// a real WAV the simulator serves and expires after 10 simulated minutes, a
// fresh URL from GET /v2/recordings/{id}, the webhook's duplicates and new-id
// re-sends under the usual knobs, and call.recording.error for a persona.

import { describe, expect, test } from 'vitest';
import {
  MAGIC_PERSONAS,
  RECORDING_SAVED_AFTER_MS,
  readWav,
  telnyxWebhook,
  voiceTime,
} from '../../src/sim/simulator.js';
import { useSimulator } from './harness.js';
import { telnyx, type Received } from './receiver.js';

const FROM = '+13125550001';
/** Manual persona: answered and hung up by the test, so nothing races the commands. */
const MANUAL = '+15555550115';
const CLIENT_STATE = Buffer.from('rec:call_1').toString('base64');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

// 10 simulated minutes are 6 real seconds at this scale: room for a slow machine.
const h = useSimulator({ seed: 'recordings', timeScale: 0.01 });

const payload = (r: Received) => r.json.data.payload;
const ms = (iso: unknown) => Date.parse(String(iso));

/** Dials the manual persona and answers it: a live, answered leg. */
async function answeredLeg(to = MANUAL): Promise<string> {
  const res = await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to });
  expect(res.status).toBe(200);
  const id = res.json.data.call_control_id as string;
  h.sim.answer(id);
  return id;
}

const action = (id: string, name: string, body: object = {}) =>
  telnyx(h.sim, 'POST', `/calls/${encodeURIComponent(id)}/actions/${name}`, body);

const recordStart = (id: string, extra: object = {}) =>
  action(id, 'record_start', { format: 'wav', channels: 'single', ...extra });

async function savedAfterHangup(id: string): Promise<Received[]> {
  h.sim.hangup(id);
  await h.sim.idle();
  return h.rx.ofType('call.recording.saved').filter((r) => payload(r)['call_control_id'] === id);
}

describe('record_start and record_stop', () => {
  test('a repeated command_id starts one recording; it is saved after the hangup, which it follows', async () => {
    const id = await answeredLeg();
    const first = await recordStart(id, { command_id: 'rec-1', client_state: CLIENT_STATE });
    const again = await recordStart(id, { command_id: 'rec-1', client_state: CLIENT_STATE });
    expect([first.status, first.json, again.status, again.json]).toEqual([
      200,
      { data: { result: 'ok' } },
      200,
      { data: { result: 'ok' } },
    ]);
    expect(h.sim.requests.filter((r) => r.path.endsWith('/record_start')).map((r) => r.deduplicated)).toEqual([
      false,
      true,
    ]);
    expect(h.sim.counts.recordingsStarted).toBe(1);

    const saved = await savedAfterHangup(id);
    expect(saved).toHaveLength(1);
    const types = h.rx.received.filter((r) => payload(r)['call_control_id'] === id).map((r) => r.json.data.event_type);
    expect(types).toEqual(['call.initiated', 'call.answered', 'call.hangup', 'call.recording.saved']);

    const hangup = h.rx.ofType('call.hangup')[0]!;
    const p = payload(saved[0]!);
    expect(Object.keys(p).sort()).toEqual([
      'call_control_id',
      'call_leg_id',
      'call_session_id',
      'channels',
      'client_state',
      'connection_id',
      'format',
      'public_recording_urls',
      'recording_ended_at',
      'recording_id',
      'recording_started_at',
      'recording_urls',
    ]);
    expect(p).toMatchObject({
      call_leg_id: payload(hangup)['call_leg_id'],
      call_session_id: payload(hangup)['call_session_id'],
      connection_id: '1',
      client_state: CLIENT_STATE,
      channels: 'single',
      format: 'wav',
      recording_ended_at: payload(hangup)['end_time'],
    });
    expect(p['recording_id']).toMatch(UUID);
    const urls = p['recording_urls'] as Record<string, string>;
    expect(Object.keys(urls)).toEqual(['wav']);
    expect(urls['wav']).toMatch(
      new RegExp(`^${h.sim.controlUrl}/recordings/${p['recording_id']}\\.wav\\?expires=\\d+&signature=[0-9a-f]{64}$`),
    );
    expect(p['public_recording_urls']).toEqual(urls);
    expect(ms(p['recording_started_at'])).toBeLessThanOrEqual(ms(p['recording_ended_at']));
    expect(ms(saved[0]!.json.data.occurred_at) - ms(payload(hangup)['end_time'])).toBe(RECORDING_SAVED_AFTER_MS);
    expect(h.sim.counts).toMatchObject({ recordingsStarted: 1, recordingsSaved: 1, recordingErrors: 0 });
  });

  test('another command_id on a leg already recording is a second recording, as at Telnyx', async () => {
    const id = await answeredLeg();
    expect((await recordStart(id, { command_id: 'a' })).status).toBe(200);
    expect((await recordStart(id, { command_id: 'b', format: 'mp3', channels: 'dual' })).status).toBe(200);
    const saved = await savedAfterHangup(id);
    expect(saved.map((r) => [payload(r)['format'], payload(r)['channels']])).toEqual([
      ['wav', 'single'],
      ['mp3', 'dual'],
    ]);
    expect(new Set(saved.map((r) => payload(r)['recording_id'])).size).toBe(2);
    expect(Object.keys(payload(saved[1]!)['recording_urls'] as object)).toEqual(['mp3']);
  });

  test('record_stop saves the recording while the call goes on; the hangup saves nothing more', async () => {
    const id = await answeredLeg();
    await recordStart(id);
    const stop = await action(id, 'record_stop', { command_id: 'stop-1' });
    expect(stop).toMatchObject({ status: 200, json: { data: { result: 'ok' } } });
    await h.sim.idle();
    expect(h.rx.ofType('call.recording.saved')).toHaveLength(1);
    expect(h.rx.ofType('call.hangup')).toHaveLength(0);
    expect((await savedAfterHangup(id)).length).toBe(1);
    expect(h.sim.counts.recordingsSaved).toBe(1);
  });

  test('refusals: not answered (90034), ended (90018), format and channels required, nothing to stop', async () => {
    const dialed = await telnyx(h.sim, 'POST', '/calls', { connection_id: '1', from: FROM, to: MANUAL });
    const ringing = dialed.json.data.call_control_id as string;
    const notAnswered = await recordStart(ringing);
    expect(notAnswered.status).toBe(422);
    expect(notAnswered.json.errors[0].code).toBe('90034');

    const id = await answeredLeg();
    const noFormat = await action(id, 'record_start', { channels: 'single' });
    expect([noFormat.status, noFormat.json.errors[0].code, noFormat.json.errors[0].source]).toEqual([
      422,
      '10004',
      { pointer: '/format' },
    ]);
    const badChannels = await action(id, 'record_start', { format: 'wav', channels: 'stereo' });
    expect([badChannels.status, badChannels.json.errors[0].source]).toEqual([422, { pointer: '/channels' }]);
    const nothing = await action(id, 'record_stop');
    expect([nothing.status, nothing.json.errors[0].detail]).toEqual([422, 'The call is not being recorded.']);

    h.sim.hangup(id);
    const ended = await recordStart(id);
    expect([ended.status, ended.json.errors[0].code]).toEqual([422, '90018']);
    expect(h.sim.counts.recordingsStarted).toBe(0);
  });
});

describe('the recording file and its URLs', () => {
  test('the URL serves a valid WAV as long as the recording, the same bytes every time', async () => {
    const id = await answeredLeg();
    await recordStart(id);
    await new Promise((r) => setTimeout(r, 30)); // 3 simulated seconds of recording
    const [saved] = await savedAfterHangup(id);
    const p = payload(saved!);
    const url = (p['recording_urls'] as { wav: string }).wav;
    const res = await fetch(url);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('audio/wav');
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(bytes.toString('ascii', 0, 4)).toBe('RIFF');
    const wav = readWav(bytes)!;
    expect(wav).toMatchObject({ sampleRate: 8000, channels: 1, bitsPerSample: 16 });
    const recorded = ms(p['recording_ended_at']) - ms(p['recording_started_at']);
    expect(recorded).toBeGreaterThanOrEqual(3000);
    expect(Math.abs(wav.durationMs - recorded)).toBeLessThanOrEqual(1);
    const again = Buffer.from(await (await fetch(url)).arrayBuffer());
    expect(again.equals(bytes)).toBe(true);
    expect(h.sim.counts.recordingDownloads).toBe(2);
  });

  test('a dual-channel recording is a stereo file; an mp3 one is served as WAV bytes labelled audio/wav', async () => {
    const id = await answeredLeg();
    await recordStart(id, { format: 'mp3', channels: 'dual' });
    const [saved] = await savedAfterHangup(id);
    const res = await fetch((payload(saved!)['recording_urls'] as { mp3: string }).mp3);
    expect([res.status, res.headers.get('content-type')]).toEqual([200, 'audio/wav']);
    expect(readWav(Buffer.from(await res.arrayBuffer()))?.channels).toBe(2);
  });

  test('10 simulated minutes after the webhook the URL is 403; GET /v2/recordings/{id} hands out a fresh one', async () => {
    const id = await answeredLeg();
    await recordStart(id);
    const [saved] = await savedAfterHangup(id);
    const p = payload(saved!);
    const url = (p['recording_urls'] as { wav: string }).wav;
    expect((await fetch(url)).status).toBe(200);

    h.offsetMs = 6100; // 610 simulated seconds at timeScale 0.01
    const expired = await fetch(url);
    expect(expired.status).toBe(403);
    expect(expired.headers.get('content-type')).toMatch(/^application\/xml/);
    expect(await expired.text()).toContain('<Code>AccessDenied</Code><Message>Request has expired</Message>');

    const got = await telnyx(h.sim, 'GET', `/recordings/${p['recording_id']}`);
    expect(got.status).toBe(200);
    expect(got.json.data).toMatchObject({
      id: p['recording_id'],
      call_control_id: id,
      call_leg_id: p['call_leg_id'],
      call_session_id: p['call_session_id'],
      channels: 'single',
      record_type: 'recording',
      source: 'call',
      status: 'completed',
      recording_started_at: new Date(Math.floor(ms(p['recording_started_at']))).toISOString(),
    });
    // Date.parse drops the microseconds the voice timestamps carry: within a millisecond.
    const recorded = ms(p['recording_ended_at']) - ms(p['recording_started_at']);
    expect(Math.abs(got.json.data.duration_millis - recorded)).toBeLessThanOrEqual(1);
    const fresh = got.json.data.download_urls.wav as string;
    expect(fresh).not.toBe(url);
    const served = await fetch(fresh);
    expect(served.status).toBe(200);
    expect(readWav(Buffer.from(await served.arrayBuffer()))?.durationMs).toBeCloseTo(got.json.data.duration_millis, 0);
  });

  test('a tampered signature or expiry is 403 SignatureDoesNotMatch; an unknown recording is 404', async () => {
    const id = await answeredLeg();
    await recordStart(id);
    const [saved] = await savedAfterHangup(id);
    const url = new URL((payload(saved!)['recording_urls'] as { wav: string }).wav);
    const later = new URL(url);
    later.searchParams.set('expires', String(Number(url.searchParams.get('expires')) + 3_600_000));
    const forged = new URL(url);
    forged.searchParams.set('signature', '0'.repeat(64));
    for (const bad of [later, forged]) {
      const res = await fetch(bad);
      expect(res.status).toBe(403);
      expect(await res.text()).toContain('<Code>SignatureDoesNotMatch</Code>');
    }
    const unknown = await telnyx(h.sim, 'GET', '/recordings/00000000-0000-4000-8000-000000000000');
    expect([unknown.status, unknown.json.errors[0].code]).toEqual([404, '10005']);
    const noAuth = await fetch(`${h.sim.url}/recordings/${payload(saved!)['recording_id']}`);
    expect(noAuth.status).toBe(401);
  });
});

describe('GET /v2/recordings', () => {
  test("lists saved recordings by Telnyx's filters (to, call_leg_id, created_at), a page at a time", async () => {
    const to = '+15555550115';
    const a = await answeredLeg(to);
    await recordStart(a);
    const [savedA] = await savedAfterHangup(a);
    const b = await answeredLeg(to);
    await recordStart(b);
    const [savedB] = await savedAfterHangup(b);
    const live = await answeredLeg(to);
    await recordStart(live); // still recording: not saved, not listed
    const list = async (q: Record<string, string>) => {
      const res = await telnyx(h.sim, 'GET', `/recordings?${new URLSearchParams(q)}`);
      expect(res.status).toBe(200);
      return res.json as { data: any[]; meta: { total_pages: number; total_results: number } };
    };
    const mine = (l: { data: any[] }) =>
      l.data.filter((r) => [a, b, live].includes(r.call_control_id)).map((r) => r.call_control_id as string);
    const all = await list({ 'filter[to]': to });
    expect(mine(all).sort()).toEqual([a, b].sort());
    expect(all.data.find((r) => r.call_control_id === a)).toMatchObject({
      id: payload(savedA!)['recording_id'],
      status: 'completed',
      record_type: 'recording',
    });
    expect(mine(await list({ 'filter[to]': '+15555550199' }))).toEqual([]);
    expect(mine(await list({ 'filter[call_leg_id]': String(payload(savedB!)['call_leg_id']) }))).toEqual([b]);
    const createdB = all.data.find((r) => r.call_control_id === b).created_at as string;
    expect(mine(await list({ 'filter[to]': to, 'filter[created_at][gte]': createdB }))).toContain(b);
    expect(mine(await list({ 'filter[to]': to, 'filter[created_at][lte]': createdB }))).toContain(b);
    const later = new Date(Date.parse(createdB) + 365 * 86_400_000).toISOString();
    expect(mine(await list({ 'filter[to]': to, 'filter[created_at][gte]': later }))).toEqual([]);
    const first = await list({ 'filter[to]': to, 'page[size]': '1' });
    const second = await list({ 'filter[to]': to, 'page[size]': '1', 'page[number]': '2' });
    expect([first.data.length, second.data.length]).toEqual([1, 1]);
    expect(second.data[0].id).not.toBe(first.data[0].id);
    expect(first.meta.total_pages).toBe(first.meta.total_results);
    h.sim.hangup(live);
  });
});

describe('the recording webhook under the knobs and personas', () => {
  test('duplicateRate and resendNewIdRate: the same id twice and once under a new id, one recording_id', async () => {
    h.sim.setBehaviour({ duplicateRate: 1, resendNewIdRate: 1 });
    const id = await answeredLeg();
    await recordStart(id);
    const saved = await savedAfterHangup(id);
    expect(saved).toHaveLength(3);
    const ids = saved.map((r) => r.json.data.id);
    expect(new Set(ids).size).toBe(2);
    expect(new Set(saved.map((r) => payload(r)['recording_id'])).size).toBe(1);
    expect(
      h.sim.webhooks
        .filter((w) => w.eventType === 'call.recording.saved')
        .map((w) => w.copy)
        .sort(),
    ).toEqual(['duplicate', 'original', 'resend']);
    expect(h.sim.counts.recordingsSaved).toBe(1);
  });

  test('dropRates can lose call.recording.saved for good; the recording is still there to look up', async () => {
    h.sim.setBehaviour({ dropRates: { 'call.recording.saved': 1 } });
    const id = await answeredLeg();
    await recordStart(id);
    expect(await savedAfterHangup(id)).toHaveLength(0);
    const lost = h.sim.dropped.find((d) => d.eventType === 'call.recording.saved')!;
    const recordingId = JSON.parse(lost.body).data.payload.recording_id as string;
    expect((await telnyx(h.sim, 'GET', `/recordings/${recordingId}`)).status).toBe(200);
  });

  test('a persona with recording "error" gets call.recording.error with Telnyx fields, and no recording', async () => {
    expect(MAGIC_PERSONAS['+15555550116']).toEqual({ recording: 'error' });
    const put = await h.control('PUT', '/personas/+14155550170', { recording: 'error', call: { manual: true } });
    expect(put.status).toBe(200);
    const id = await answeredLeg('+14155550170');
    await recordStart(id, { client_state: CLIENT_STATE });
    h.sim.hangup(id);
    await h.sim.idle();
    expect(h.rx.ofType('call.recording.saved')).toHaveLength(0);
    const [error] = h.rx.ofType('call.recording.error');
    expect(payload(error!)).toEqual({
      call_control_id: id,
      call_leg_id: payload(h.rx.ofType('call.hangup')[0]!)['call_leg_id'],
      call_session_id: payload(h.rx.ofType('call.hangup')[0]!)['call_session_id'],
      client_state: CLIENT_STATE,
      connection_id: '1',
      reason: 'Internal server error',
    });
    expect(h.sim.counts).toMatchObject({ recordingsStarted: 1, recordingsSaved: 0, recordingErrors: 1 });
    expect((await h.control('PUT', '/personas/+14155550171', { recording: 'lost' })).status).toBe(400);
  });

  test("the builders render the simulator's payloads key for key", async () => {
    const id = await answeredLeg();
    await recordStart(id);
    const [saved] = await savedAfterHangup(id);
    const built = JSON.parse(
      telnyxWebhook.callRecordingSaved({
        callControlId: id,
        from: FROM,
        to: MANUAL,
        clientState: CLIENT_STATE,
        recordingId: '11111111-2222-4333-8444-555555555555',
        eventId: 'evt-1',
        occurredAt: Date.parse('2026-01-01T00:00:10Z'),
        recordingStartedAt: Date.parse('2026-01-01T00:00:00Z'),
        recordingEndedAt: Date.parse('2026-01-01T00:00:09Z'),
      }),
    );
    expect(Object.keys(built.data.payload).sort()).toEqual(Object.keys(payload(saved!)).sort());
    expect(built.data).toMatchObject({
      event_type: 'call.recording.saved',
      id: 'evt-1',
      occurred_at: voiceTime(Date.parse('2026-01-01T00:00:10Z')),
      payload: {
        call_control_id: id,
        client_state: CLIENT_STATE,
        recording_id: '11111111-2222-4333-8444-555555555555',
        recording_started_at: '2026-01-01T00:00:00.000000Z',
        recording_ended_at: '2026-01-01T00:00:09.000000Z',
        format: 'wav',
      },
    });
    const error = JSON.parse(telnyxWebhook.callRecordingError({ callControlId: id, from: FROM, to: MANUAL }));
    expect(Object.keys(error.data.payload).sort()).toEqual([
      'call_control_id',
      'call_leg_id',
      'call_session_id',
      'client_state',
      'connection_id',
      'reason',
    ]);
  });

  test('the control state shows the recording counts', async () => {
    const id = await answeredLeg();
    await recordStart(id);
    await savedAfterHangup(id);
    const { json } = await h.control('GET', '/state');
    expect(json.counts).toMatchObject({ recordingsStarted: 1, recordingsSaved: 1, transcriptions: 0 });
  });
});
