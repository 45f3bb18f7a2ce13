// The simulated speech-to-text endpoint, POST /v2/ai/audio/transcriptions: an
// OpenAI-compatible multipart upload (or file_url) answered with a transcript
// that is a pure function of the audio, OpenAI-style errors, a 4xx a test can
// produce from the audio alone (too short) and a 500 from the error rate.

import { describe, expect, test } from 'vitest';
import { MIN_AUDIO_MS, toneWav, transcriptOf } from '../../src/sim/simulator.js';
import { parseMultipart } from '../../src/sim/multipart.js';
import { useSimulator } from './harness.js';

const MODEL = 'distil-whisper/distil-large-v2';
const h = useSimulator({ seed: 'transcription', timeScale: 0.01 });

function form(fields: Record<string, string>, file?: Buffer, filename = 'recording.wav'): FormData {
  const f = new FormData();
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  if (file) f.append('file', new Blob([file], { type: 'audio/wav' }), filename);
  return f;
}

async function transcribe(body: FormData | string, headers: Record<string, string> = {}, auth = true) {
  const res = await fetch(h.sim.transcriptionUrl, {
    method: 'POST',
    headers: { ...(auth ? { authorization: `Bearer ${h.sim.apiKey}` } : {}), ...headers },
    body,
  });
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    // plain text
  }
  return { status: res.status, type: res.headers.get('content-type'), text, json };
}

describe('POST /v2/ai/audio/transcriptions', () => {
  test('the same bytes give the same text, with the duration from the WAV header; other bytes another text', async () => {
    const five = toneWav(5000, 1, 'rec-a');
    const first = await transcribe(form({ model: MODEL }, five));
    expect(first.status).toBe(200);
    expect(first.json).toEqual({ text: transcriptOf(five, 5000), duration: 5 });
    expect(first.json.text).toMatch(/^Simulated transcript of a 5 second recording: [a-z]+( [a-z]+){4}\.$/);
    const again = await transcribe(form({ model: MODEL }, five));
    expect(again.json).toEqual(first.json);
    const other = await transcribe(form({ model: MODEL }, toneWav(5000, 1, 'rec-b')));
    expect(other.json.text).not.toBe(first.json.text);
    expect(h.sim.counts).toMatchObject({ transcriptionRequests: 3, transcriptions: 3 });
    const logged = h.sim.requests.filter((r) => r.path === '/v2/ai/audio/transcriptions');
    expect(logged[0]?.body).toEqual({
      model: MODEL,
      file: { filename: 'recording.wav', bytes: five.length },
      fileUrl: null,
    });
  });

  test('response_format text and verbose_json', async () => {
    const wav = toneWav(2000, 1, 'fmt');
    const text = await transcribe(form({ model: MODEL, response_format: 'text' }, wav));
    expect([text.status, text.type, text.text]).toEqual([200, 'text/plain; charset=utf-8', transcriptOf(wav, 2000)]);
    const verbose = await transcribe(form({ model: MODEL, response_format: 'verbose_json' }, wav));
    expect(verbose.json.segments).toEqual([{ id: 0, start: 0, end: 2, text: transcriptOf(wav, 2000) }]);
  });

  test('file_url: a recording URL of the simulator is fetched and transcribed like its bytes', async () => {
    const res = await fetch(`${h.sim.url}/calls`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.sim.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ connection_id: '1', from: '+13125550001', to: '+15555550115' }),
    });
    const id = ((await res.json()) as any).data.call_control_id as string;
    h.sim.answer(id);
    await fetch(`${h.sim.url}/calls/${encodeURIComponent(id)}/actions/record_start`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.sim.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ format: 'wav', channels: 'single' }),
    });
    await new Promise((r) => setTimeout(r, 25)); // 2.5 simulated seconds
    h.sim.hangup(id);
    await h.sim.idle();
    const url = (h.rx.ofType('call.recording.saved')[0]!.json.data.payload['recording_urls'] as { wav: string }).wav;
    const bytes = Buffer.from(await (await fetch(url)).arrayBuffer());
    const byUrl = await transcribe(form({ model: MODEL, file_url: url }));
    const byFile = await transcribe(form({ model: MODEL }, bytes));
    expect(byUrl.status).toBe(200);
    expect(byUrl.json).toEqual(byFile.json);
    const both = await transcribe(form({ model: MODEL, file_url: url }, bytes));
    expect([both.status, both.json.error.message]).toEqual([400, "Send either 'file' or 'file_url', not both."]);
    const gone = await transcribe(form({ model: MODEL, file_url: `${url}0` }));
    expect([gone.status, gone.json.error.message]).toEqual([400, "Could not download 'file_url': HTTP 403."]);
  });

  test('401 without the key, OpenAI-style; nothing reaches the engine', async () => {
    const res = await transcribe(form({ model: MODEL }, toneWav(2000, 1, 'x')), {}, false);
    expect(res.status).toBe(401);
    expect(res.json).toEqual({
      error: {
        message: 'Incorrect API key provided.',
        type: 'invalid_request_error',
        param: null,
        code: 'invalid_api_key',
      },
    });
    expect(h.sim.counts.transcriptionRequests).toBe(0);
  });

  test.each([
    ['no model', form({}, toneWav(2000, 1, 'x')), 'model', 'missing_required_parameter'],
    ['no audio', form({ model: MODEL }), 'file', null],
    ['an empty file', form({ model: MODEL }, Buffer.alloc(0)), 'file', null],
    ['not audio', form({ model: MODEL }, Buffer.from('ID3 this is no wav')), 'file', null],
    [`audio shorter than ${MIN_AUDIO_MS} ms`, form({ model: MODEL }, toneWav(500, 1, 'x')), 'file', 'audio_too_short'],
  ])('400 for %s, OpenAI-style', async (_what, body, param, code) => {
    const res = await transcribe(body);
    expect(res.status).toBe(400);
    expect(res.json.error).toMatchObject({ type: 'invalid_request_error', param, code });
    expect(typeof res.json.error.message).toBe('string');
    expect(h.sim.counts.transcriptions).toBe(0);
  });

  test('400 for a body that is not multipart', async () => {
    const res = await transcribe(JSON.stringify({ model: MODEL }), { 'content-type': 'application/json' });
    expect(res.status).toBe(400);
    expect(res.json.error.type).toBe('invalid_request_error');
  });

  test('transcriptionErrorRate 1: 500, a server_error to retry', async () => {
    h.sim.setBehaviour({ transcriptionErrorRate: 1 });
    const res = await transcribe(form({ model: MODEL }, toneWav(2000, 1, 'x')));
    expect(res.status).toBe(500);
    expect(res.json.error.type).toBe('server_error');
    expect(h.sim.counts).toMatchObject({ transcriptionRequests: 1, transcriptions: 0 });
  });

  test('an upload over the JSON body limit (a 70 s recording, 1.1 MB) is accepted', async () => {
    const long = toneWav(70_000, 1, 'long');
    expect(long.length).toBeGreaterThan(1024 * 1024);
    const res = await transcribe(form({ model: MODEL }, long));
    expect([res.status, res.json.duration]).toEqual([200, 70]);
  });
});

describe('the multipart reader', () => {
  test('a quoted boundary, a plain field and a file part, bytes untouched', () => {
    const bytes = Buffer.from([0, 13, 10, 45, 45, 255]);
    const body = Buffer.concat([
      Buffer.from('preamble\r\n--b"q\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n'),
      Buffer.from('--b"q\r\nContent-Disposition: form-data; name="file"; filename="a;b.wav"\r\n'),
      Buffer.from('Content-Type: audio/wav\r\n\r\n'),
      bytes,
      Buffer.from('\r\n--b"q--\r\n'),
    ]);
    const parts = parseMultipart(body, 'b"q');
    expect(parts.map((p) => [p.name, p.filename, p.contentType])).toEqual([
      ['model', null, null],
      ['file', 'a;b.wav', 'audio/wav'],
    ]);
    expect(parts[0]!.data.toString()).toBe('whisper');
    expect(parts[1]!.data.equals(bytes)).toBe(true);
    expect(() =>
      parseMultipart(Buffer.from('--x\r\nContent-Disposition: form-data; name="a"\r\n\r\nno end'), 'x'),
    ).toThrow(/closing boundary/);
  });
});
