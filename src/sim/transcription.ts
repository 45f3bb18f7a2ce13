// The simulated speech-to-text engine behind POST /v2/ai/audio/transcriptions,
// Telnyx's OpenAI-compatible transcription API: multipart/form-data with `model`
// (required) and the audio as `file` (an upload) or `file_url` (fetched, 15 s at
// most, as Telnyx does), never both; answers {"text","duration"} (or plain text
// for response_format=text, segments for verbose_json), and errors OpenAI's way,
// {"error":{"message","type","param","code"}}.
//
// The text is a pure function of the audio bytes: a few words picked by the
// bytes' SHA-256 and the duration read from the WAV header, e.g. "Simulated
// transcript of a 5 second recording: alpha kilo tango zulu echo.", so the same
// recording transcribes to the same text on every request and two recordings
// differ. Only PCM WAV is understood (the simulator's own recordings are WAV);
// anything else, an empty file or audio shorter than MIN_AUDIO_MS is a 400, a
// final answer a client must not retry, and transcriptionErrorRate answers 500,
// one it should.

import { createHash } from 'node:crypto';
import type { Account } from './account.js';
import { readWav } from './audio.js';
import { formBoundary, MultipartError, parseMultipart, type FormPart } from './multipart.js';

/** Shorter audio is refused as too short (400): a deterministic 4xx any test can produce with a short call. */
export const MIN_AUDIO_MS = 1000;
const FETCH_TIMEOUT_MS = 15_000;
const WORDS = [
  'alpha',
  'bravo',
  'charlie',
  'delta',
  'echo',
  'foxtrot',
  'golf',
  'hotel',
  'india',
  'juliett',
  'kilo',
  'lima',
  'mike',
  'november',
  'oscar',
  'papa',
  'quebec',
  'romeo',
  'sierra',
  'tango',
  'uniform',
  'victor',
  'whiskey',
  'xray',
  'yankee',
  'zulu',
];
const WORD_COUNT = 5;

export interface TranscriptionAnswer {
  status: number;
  contentType: string;
  body: string;
  /** What the request carried, for the request log (not the bytes). */
  summary: { model: string | null; file: { filename: string | null; bytes: number } | null; fileUrl: string | null };
}

export interface TranscriptionCounts {
  /** Every request that reached the engine (authenticated). */
  transcriptionRequests: number;
  /** Requests answered 200 with a transcript. */
  transcriptions: number;
}

type Summary = TranscriptionAnswer['summary'];

export class Transcriber {
  counts: TranscriptionCounts = { transcriptionRequests: 0, transcriptions: 0 };

  constructor(private readonly account: Account) {}

  async transcribe(contentType: string | undefined, body: unknown): Promise<TranscriptionAnswer> {
    this.counts.transcriptionRequests++;
    const summary: Summary = { model: null, file: null, fileUrl: null };
    const rate = this.account.behaviour().transcriptionErrorRate;
    if (rate > 0 && this.account.random() < rate) {
      return openAiError(500, summary, 'The server had an error while processing your request.', 'server_error');
    }
    const boundary = formBoundary(contentType);
    if (boundary === null || !Buffer.isBuffer(body)) {
      return invalid(summary, 'The request must be multipart/form-data with a boundary.', null);
    }
    let parts: FormPart[];
    try {
      parts = parseMultipart(body, boundary);
    } catch (err) {
      if (err instanceof MultipartError) return invalid(summary, `Malformed multipart body: ${err.message}.`, null);
      throw err;
    }
    const field = (name: string) => parts.find((p) => p.name === name);
    const text = (name: string) => {
      const p = field(name);
      return p === undefined ? null : p.data.toString('utf8').trim();
    };
    const model = text('model');
    summary.model = model;
    const file = field('file');
    const fileUrl = text('file_url');
    summary.fileUrl = fileUrl;
    if (file) summary.file = { filename: file.filename, bytes: file.data.length };
    if (!model) return invalid(summary, "'model' is a required property.", 'model', 'missing_required_parameter');
    if (file && fileUrl) return invalid(summary, "Send either 'file' or 'file_url', not both.", 'file');
    if (!file && !fileUrl) return invalid(summary, "One of 'file' or 'file_url' is required.", 'file');
    const format = text('response_format') ?? 'json';
    if (!['json', 'text', 'verbose_json'].includes(format)) {
      return invalid(summary, "'response_format' must be json, text or verbose_json.", 'response_format');
    }

    let audio: Buffer;
    if (file) audio = file.data;
    else {
      const fetched = await download(fileUrl!);
      if (typeof fetched === 'string') return invalid(summary, fetched, 'file_url');
      audio = fetched;
    }
    if (audio.length === 0) return invalid(summary, 'The audio file is empty.', 'file');
    const wav = readWav(audio);
    if (wav === null) {
      return invalid(summary, 'Invalid file format: the simulator transcribes PCM WAV audio only.', 'file');
    }
    if (wav.durationMs < MIN_AUDIO_MS) {
      return invalid(
        summary,
        `Audio file is too short: ${wav.durationMs} ms, minimum ${MIN_AUDIO_MS} ms.`,
        'file',
        'audio_too_short',
      );
    }

    this.counts.transcriptions++;
    const duration = Math.round(wav.durationMs) / 1000;
    const transcript = transcriptOf(audio, wav.durationMs);
    if (format === 'text') return { status: 200, contentType: 'text/plain; charset=utf-8', body: transcript, summary };
    const json =
      format === 'verbose_json'
        ? { text: transcript, duration, segments: [{ id: 0, start: 0, end: duration, text: transcript }] }
        : { text: transcript, duration };
    return { status: 200, contentType: 'application/json; charset=utf-8', body: JSON.stringify(json), summary };
  }

  reset(): void {
    this.counts = { transcriptionRequests: 0, transcriptions: 0 };
  }
}

/** The deterministic transcript of some audio bytes. */
export function transcriptOf(audio: Buffer, durationMs: number): string {
  const digest = createHash('sha256').update(audio).digest();
  const words = Array.from({ length: WORD_COUNT }, (_, i) => WORDS[digest[i]! % WORDS.length]);
  return `Simulated transcript of a ${Math.round(durationMs / 1000)} second recording: ${words.join(' ')}.`;
}

/** The bytes at a file_url, or why they could not be had. */
async function download(url: string): Promise<Buffer | string> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return "'file_url' is not a valid URL.";
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return "'file_url' must be an http(s) URL.";
  try {
    const res = await fetch(parsed, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    if (!res.ok) {
      await res.arrayBuffer().catch(() => undefined);
      return `Could not download 'file_url': HTTP ${res.status}.`;
    }
    return Buffer.from(await res.arrayBuffer());
  } catch (err) {
    return `Could not download 'file_url': ${(err as Error).message}.`;
  }
}

function invalid(summary: Summary, message: string, param: string | null, code: string | null = null) {
  return openAiError(400, summary, message, 'invalid_request_error', param, code);
}

function openAiError(
  status: number,
  summary: Summary,
  message: string,
  type: string,
  param: string | null = null,
  code: string | null = null,
): TranscriptionAnswer {
  return {
    status,
    contentType: 'application/json; charset=utf-8',
    body: JSON.stringify({ error: { message, type, param, code } }),
    summary,
  };
}
