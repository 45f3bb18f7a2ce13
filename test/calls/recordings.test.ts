// Recording and transcription, exactly once, through the real pipeline (API,
// workers, the simulated carrier and its speech-to-text engine, signed webhooks
// into ingest): the carrier's recording webhook replayed and re-sent under a new
// id is one recording, one download, one transcription, one event of each kind
// and one bill of each; the hangup repeated starts nothing more; a job run twice
// (as after a crash between the engine's answer and our commit) writes one
// transcript; the engine's 5xx are retried and its 4xx is final; a recording
// whose audio cannot be fetched is an error on the recording, nothing half-stored.

import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callLock } from '../../src/calls/calls.sql.js';
import { withTx } from '../../src/db/tx.js';
import { fetchTask, recordTask, transcribeTask } from '../../src/recordings/jobs.js';
import { recordingFailed } from '../../src/recordings/recordings.js';
import { postgresAudioStore } from '../../src/recordings/storage.js';
import type { Platform } from '../../src/platform.js';
import { retryPolicies } from '../../src/jobs/retry.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { telnyxCarriers } from '../support/carrier.js';
import { startTestPlatform } from '../support/platform.js';

const OURS = '+13125550701';
const INBOUND = '+13125550702';
const ANSWERS = '+15555550100'; // answers after 1 s, talks 3 s
const RECORDING_FAILS = '+15555550116';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;
/** In front of the simulator's speech-to-text engine: answers the next scripted statuses itself, then passes on. */
let engine: { server: Server; url: string; script: number[]; requests: number; delayMs: number };

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.2, seed: 'recordings', connectionId: 'conn-rec' });
  engine = await startEngineProxy(`${sim.url}/ai/audio/transcriptions`);
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: {
      ...sim.carrierEnv(),
      HANDSET_TRANSCRIPTION_URL: engine.url,
      HANDSET_TRANSCRIPTION_RETRY_SCHEDULE: '200ms,200ms,200ms',
    },
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  expect((await acme.post('/v1/phone_numbers', { number: OURS })).status).toBe(201);
  const inbound = await acme.post('/v1/phone_numbers', {
    number: INBOUND,
    inbound_ring: [ANSWERS],
    ring_timeout_secs: 10,
    record: true,
  });
  expect(inbound.status, JSON.stringify(inbound.json)).toBe(201);
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  engine.server.close();
  await db.drop();
});

async function startEngineProxy(target: string) {
  const e = { server: null as unknown as Server, url: '', script: [] as number[], requests: 0, delayMs: 0 };
  e.server = createServer(async (req, res) => {
    e.requests += 1;
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (e.delayMs > 0) await new Promise((r) => setTimeout(r, e.delayMs));
    const scripted = e.script.shift();
    if (scripted !== undefined) {
      res.writeHead(scripted, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `scripted ${scripted}`, type: 'test' } }));
      return;
    }
    const answer = await fetch(target, {
      method: 'POST',
      headers: { 'content-type': req.headers['content-type']!, authorization: req.headers.authorization ?? '' },
      body: Buffer.concat(chunks),
    });
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(await answer.text());
  });
  await new Promise<void>((r) => e.server.listen(0, '127.0.0.1', r));
  e.url = `http://127.0.0.1:${(e.server.address() as AddressInfo).port}/v1/audio/transcriptions`;
  return e;
}

const settled = () =>
  eventually(async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0);
const events = (type: string, subjectId: string) =>
  count(db.pool, 'SELECT * FROM outbound_events WHERE type = $1 AND subject_id = $2', [type, subjectId]);
const bills = (kind: string, sourceId: string) =>
  db.pool
    .query<{ n: number; q: number }>(
      'SELECT count(*)::int AS n, coalesce(sum(quantity), 0)::int AS q FROM usage_records WHERE kind = $1 AND source_id = $2',
      [kind, sourceId],
    )
    .then((r) => r.rows[0]!);
const recordStarts = (callControlId: string) =>
  sim.requests.filter((r) => r.method === 'POST' && r.path.includes(`/calls/${callControlId}/actions/record_start`));
const recordingsOf = async (callId: string) => (await acme.get(`/v1/calls/${callId}/recordings`)).json.data as any[];

async function placeCall(body: Record<string, unknown>) {
  const res = await acme.post('/v1/calls', { from: OURS, to: [ANSWERS], ring_timeout_secs: 10, ...body });
  expect(res.status, JSON.stringify(res.json)).toBe(201);
  const id = res.json.id as string;
  await eventually(async () => (await acme.get(`/v1/calls/${id}`)).json.status === 'completed', 30_000);
  return id;
}

const BY_HAND = {
  jobId: 'by-hand',
  attempts: 1,
  maxAttempts: 1,
  inSerialQueue: false,
  abortSignal: new AbortController().signal,
};

/** The jobs' dependencies as a worker has them, for running a job by hand. */
const jobDeps = () => ({
  pool: db.pool,
  carriers: telnyxCarriers({ apiUrl: sim.url, apiKey: sim.apiKey, connectionId: 'conn-rec' }),
  log: createLogger('silent'),
  policies: retryPolicies(30_000),
  store: postgresAudioStore,
  transcriber: { url: engine.url, model: 'distil-whisper/distil-large-v2', apiKey: sim.apiKey },
  transcriptionRetries: [200, 200, 200],
});

/** The carrier's recording webhook for a call, as it was stored. */
async function storedRecordingWebhook(callId: string): Promise<any> {
  const { rows } = await db.pool.query(
    `SELECT ce.payload FROM carrier_events ce JOIN call_legs l ON l.carrier_ref = ce.subject
      WHERE l.call_id = $1 AND ce.event_type = 'call.recording.saved' ORDER BY ce.created_at LIMIT 1`,
    [callId],
  );
  return rows[0]?.payload;
}

describe('a recorded, transcribed call', () => {
  let callId: string;
  let recordingId: string;

  it('starts one recording, stores it once however often the carrier repeats it, and transcribes it once', async () => {
    callId = await placeCall({ record: true, transcribe: true });
    const recording = await eventually(async () => {
      const [r] = await recordingsOf(callId);
      return r?.transcription_status === 'completed' && r;
    }, 30_000);
    recordingId = recording.id;
    const webhook = await storedRecordingWebhook(callId);
    expect(webhook).toBeTruthy();
    // The same webhook twice more, and once under a new event id.
    const body = JSON.stringify(webhook);
    expect(await sim.deliver(body)).toBe(200);
    expect(await sim.deliver(body)).toBe(200);
    expect(await sim.deliver(JSON.stringify({ ...webhook, data: { ...webhook.data, id: randomUUID() } }))).toBe(200);
    await settled();

    const legRef = (await db.pool.query('SELECT carrier_ref FROM call_legs WHERE call_id = $1', [callId])).rows[0]!
      .carrier_ref as string;
    expect(recordStarts(legRef)).toHaveLength(1);
    expect(await count(db.pool, 'SELECT * FROM recordings WHERE call_id = $1', [callId])).toBe(1);
    expect(await count(db.pool, 'SELECT * FROM recording_audio WHERE recording_id = $1', [recordingId])).toBe(1);
    expect(await events('call.recording.saved', recordingId)).toBe(1);
    expect(await events('call.transcription.completed', recordingId)).toBe(1);
    expect(await bills('recording_minute', recordingId)).toEqual({
      n: 1,
      q: Math.ceil(recording.duration_seconds / 60),
    });
    expect(await bills('transcription_minute', recordingId)).toEqual({
      n: 1,
      q: Math.ceil(recording.duration_seconds / 60),
    });
    expect(await bills('call_minute', callId)).toMatchObject({ n: 1 });
    expect(engine.requests).toBe(1);
    expect(recording).toMatchObject({ call_id: callId, status: 'saved', audio_status: 'stored' });
    expect(recording.transcript).toEqual(expect.any(String));
    expect(recording.duration_seconds).toBeGreaterThan(0);
  });

  it("GET /v1/recordings/{id}/audio answers the carrier's bytes: a WAV of the recording's length", async () => {
    const res = await fetch(`${platform.apiUrl}/v1/recordings/${recordingId}/audio`, {
      headers: { authorization: `Bearer ${acme.key}` },
    });
    expect(res.status).toBe(200);
    const bytes = Buffer.from(await res.arrayBuffer());
    const stored = (await db.pool.query('SELECT bytes FROM recording_audio WHERE recording_id = $1', [recordingId]))
      .rows[0]!.bytes as Buffer;
    expect(bytes.equals(stored)).toBe(true);
    // …which are the carrier's own: what its fresh download address serves now.
    const carrierId = (await db.pool.query('SELECT carrier_recording_id FROM recordings WHERE id = $1', [recordingId]))
      .rows[0]!.carrier_recording_id as string;
    const lookup = await fetch(`${sim.url}/recordings/${carrierId}`, {
      headers: { authorization: `Bearer ${sim.apiKey}` },
    });
    const urls = ((await lookup.json()) as { data: { download_urls: Record<string, string> } }).data.download_urls;
    const fromCarrier = Buffer.from(await (await fetch(Object.values(urls)[0]!)).arrayBuffer());
    expect(fromCarrier.length).toBeGreaterThan(44);
    expect(bytes.equals(fromCarrier)).toBe(true);
    expect(bytes.subarray(0, 4).toString('latin1')).toBe('RIFF');
    expect(bytes.subarray(8, 12).toString('latin1')).toBe('WAVE');
  });

  it('a second hangup, and the hangup under a new id, start no second transcription', async () => {
    const { rows } = await db.pool.query(
      `SELECT ce.payload FROM carrier_events ce JOIN call_legs l ON l.carrier_ref = ce.subject
        WHERE l.call_id = $1 AND ce.event_type = 'call.hangup' LIMIT 1`,
      [callId],
    );
    const hangup = rows[0]!.payload;
    const before = engine.requests;
    expect(await sim.deliver(JSON.stringify(hangup))).toBe(200);
    expect(await sim.deliver(JSON.stringify({ ...hangup, data: { ...hangup.data, id: randomUUID() } }))).toBe(200);
    await settled();
    await new Promise((r) => setTimeout(r, 1000));
    expect(engine.requests).toBe(before);
    expect(await events('call.transcription.completed', recordingId)).toBe(1);
    expect(
      await count(db.pool, 'SELECT * FROM graphile_worker.jobs WHERE task_identifier = $1', ['recording.transcribe']),
    ).toBe(0);
  });

  it("another account's recording is 404, as is its audio", async () => {
    const other = await createAccount(db.pool, platform.apiUrl!, 'Other');
    expect((await other.get(`/v1/recordings/${recordingId}`)).status).toBe(404);
    expect((await other.get(`/v1/recordings/${recordingId}/audio`)).status).toBe(404);
    expect((await other.get(`/v1/calls/${callId}/recordings`)).status).toBe(404);
  });
});

describe('what is and is not recorded', () => {
  it('a call without the flags asks for no recording and has none', async () => {
    const id = await placeCall({});
    await settled();
    const legRef = (await db.pool.query('SELECT carrier_ref FROM call_legs WHERE call_id = $1', [id])).rows[0]!
      .carrier_ref as string;
    expect(recordStarts(legRef)).toHaveLength(0);
    expect(await recordingsOf(id)).toEqual([]);
  });

  it('record without transcribe: a recording, no transcription', async () => {
    const id = await placeCall({ record: true });
    const r = await eventually(
      async () => (await recordingsOf(id))[0]?.audio_status === 'stored' && (await recordingsOf(id))[0],
      30_000,
    );
    expect(r.transcription_status).toBe('none');
    expect(await events('call.transcription.completed', r.id)).toBe(0);
  });

  it('a recording error noted after the call’s recording was saved changes nothing: no error, no event', async () => {
    const id = await placeCall({ record: true });
    await eventually(async () => (await recordingsOf(id)).length === 1, 30_000);
    // As a record job re-run after the hangup would, once the carrier has forgotten its command id.
    const noted = await withTx(db.pool, async (tx) => {
      await callLock(tx, id);
      return recordingFailed(tx, id, 'the call ended before its recording could start', new Date());
    });
    expect(noted).toBe(false);
    expect((await acme.get(`/v1/calls/${id}`)).json.recording_error).toBeNull();
    expect(await events('call.recording.failed', id)).toBe(0);
  });

  it('an inbound call to a number whose plan records is recorded once it is bridged', async () => {
    const from = '+14155550777';
    sim.injectInboundCall({ from, to: INBOUND });
    const call = await eventually(async () => {
      const list = (await acme.get('/v1/calls?direction=inbound&limit=10')).json.data as any[];
      const c = list.find((x) => x.from === from);
      return c?.status === 'completed' && c;
    }, 30_000);
    expect(call.record).toBe(true);
    const [r] = await eventually(async () => {
      const rs = await recordingsOf(call.id);
      return rs.length > 0 && rs[0].audio_status !== 'pending' && rs;
    }, 30_000);
    expect(r.audio_status).toBe('stored');
  });

  it('a recording the carrier could not make is noted on the call, announced once, and nothing is billed', async () => {
    const res = await acme.post('/v1/calls', {
      from: OURS,
      to: [RECORDING_FAILS],
      ring_timeout_secs: 10,
      record: true,
    });
    const id = res.json.id as string;
    const call = await eventually(async () => {
      const c = (await acme.get(`/v1/calls/${id}`)).json;
      return c.status === 'completed' && c.recording_error && c;
    }, 30_000);
    expect(call.recording_error).toEqual(expect.any(String));
    await settled();
    expect(await events('call.recording.failed', id)).toBe(1);
    expect(await recordingsOf(id)).toEqual([]);
  });
});

describe('a call too short to record', () => {
  it('ends before its recording starts: noted on the call, announced once, and its transcription stops waiting', async () => {
    const quick = '+15555550140';
    sim.setPersona(quick, { call: { answerAfterMs: 1000, talkMs: 1 } });
    const res = await acme.post('/v1/calls', { from: OURS, to: [quick], ring_timeout_secs: 10, transcribe: true });
    const id = res.json.id as string;
    const call = await eventually(async () => {
      const c = (await acme.get(`/v1/calls/${id}`)).json;
      return c.status === 'completed' && c.recording_error && c;
    }, 30_000);
    expect(call.recording_error).toBe('the call ended before its recording could start');
    await eventually(
      async () =>
        (await count(db.pool, `SELECT * FROM graphile_worker.jobs WHERE key = $1`, [`recording.transcribe:${id}`])) ===
        0,
      30_000,
    );
    expect(await events('call.recording.failed', id)).toBe(1);
    expect(await recordingsOf(id)).toEqual([]);
  });

  it('a record job that runs after the hangup was applied asks the carrier, and its "already ended" is the recording error', async () => {
    // The hangup can be applied before the record job its answer enqueued runs (both come in
    // one relay batch when the call is that short). Staged deterministically: a call that
    // completed, then asked to be recorded, as that job finds it.
    const id = await placeCall({});
    await settled();
    await db.pool.query('UPDATE calls SET record = true WHERE id = $1', [id]);
    const legRef = (await db.pool.query('SELECT carrier_ref FROM call_legs WHERE call_id = $1', [id])).rows[0]!
      .carrier_ref as string;
    const job = recordTask(jobDeps());
    await job({ callId: id }, BY_HAND);
    await job({ callId: id }, BY_HAND);
    const call = (await acme.get(`/v1/calls/${id}`)).json;
    expect(call.recording_error).toBe('the call ended before its recording could start');
    expect(recordStarts(legRef).length).toBeGreaterThanOrEqual(1);
    expect(await events('call.recording.failed', id)).toBe(1);
    expect(await recordingsOf(id)).toEqual([]);
  });
});

describe('the transcription engine', () => {
  it('two 500s and then an answer: completed once, three requests', async () => {
    engine.script = [500, 500];
    const before = engine.requests;
    const id = await placeCall({ transcribe: true });
    const r = await eventually(async () => {
      const [x] = await recordingsOf(id);
      return x?.transcription_status === 'completed' && x;
    }, 30_000);
    expect(engine.requests - before).toBe(3);
    expect(await events('call.transcription.completed', r.id)).toBe(1);
  });

  it('a 400 is final: failed with the reason, asked once, nothing billed', async () => {
    engine.script = [400];
    const before = engine.requests;
    const id = await placeCall({ transcribe: true });
    const r = await eventually(async () => {
      const [x] = await recordingsOf(id);
      return x?.transcription_status === 'failed' && x;
    }, 30_000);
    expect(r.transcription_error).toMatch(/400/);
    await new Promise((res) => setTimeout(res, 1000));
    expect(engine.requests - before).toBe(1);
    expect(await bills('transcription_minute', r.id)).toEqual({ n: 0, q: 0 });
    expect(await events('call.transcription.completed', r.id)).toBe(0);
  });

  it('the job run again after the engine answered (a crash before our commit) writes one transcript and one event', async () => {
    const id = await placeCall({ transcribe: true });
    const r = await eventually(async () => {
      const [x] = await recordingsOf(id);
      return x?.transcription_status === 'completed' && x;
    }, 30_000);
    const deps = jobDeps();
    // As if the first run had died after the engine's answer: the transcript is reset to pending, then two runs race.
    await db.pool.query(`UPDATE recordings SET transcript = NULL, transcription_status = 'pending' WHERE id = $1`, [
      r.id,
    ]);
    await db.pool.query(`DELETE FROM outbound_events WHERE subject_id = $1 AND type = 'call.transcription.completed'`, [
      r.id,
    ]);
    await db.pool.query(`DELETE FROM usage_records WHERE source_id = $1 AND kind = 'transcription_minute'`, [r.id]);
    const before = engine.requests;
    // The engine answers slowly, so both runs have asked before either commits.
    engine.delayMs = 500;
    try {
      await Promise.all([transcribeTask(deps)({ callId: id }, BY_HAND), transcribeTask(deps)({ callId: id }, BY_HAND)]);
    } finally {
      engine.delayMs = 0;
    }
    expect(engine.requests - before).toBe(2);
    expect(await events('call.transcription.completed', r.id)).toBe(1);
    expect(await bills('transcription_minute', r.id)).toMatchObject({ n: 1 });
  });

  it('audio the carrier no longer serves, and no fresh address for it, is an error on the recording; nothing half-stored', async () => {
    const id = await placeCall({ record: true });
    const r = await eventually(async () => (await recordingsOf(id))[0], 30_000);
    await eventually(async () => (await recordingsOf(id))[0].audio_status !== 'pending', 30_000);
    // A recording whose carrier id the carrier does not know, fetched from an address that is gone, past the window.
    const { rows } = await db.pool.query(
      `INSERT INTO recordings (account_id, call_id, carrier, carrier_recording_id, carrier_ref, started_at, ended_at, duration_seconds)
       SELECT account_id, call_id, carrier, $2, carrier_ref, started_at, ended_at, duration_seconds FROM recordings WHERE id = $1
       RETURNING id`,
      [r.id, randomUUID()],
    );
    const orphan = rows[0]!.id as string;
    const deps = jobDeps();
    const longAgo = new Date(Date.now() - 2 * 3_600_000).toISOString();
    await fetchTask(deps)(
      {
        recordingId: orphan,
        url: `${sim.url.replace(/\/v2$/, '')}/_sim/recordings/${randomUUID()}.wav`,
        since: longAgo,
        attempt: 9,
      },
      BY_HAND,
    );
    const after = (await acme.get(`/v1/recordings/${orphan}`)).json;
    expect(after.audio_status).toBe('failed');
    expect(after.audio_error).toEqual(expect.any(String));
    expect(await count(db.pool, 'SELECT * FROM recording_audio WHERE recording_id = $1', [orphan])).toBe(0);
    expect((await acme.get(`/v1/recordings/${orphan}/audio`)).status).toBe(409);
  });
});
