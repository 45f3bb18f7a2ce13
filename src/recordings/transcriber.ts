// A client of an OpenAI-compatible speech-to-text endpoint (POST
// …/audio/transcriptions: Telnyx's, OpenAI's, or a self-hosted Whisper server):
// the stored audio as a multipart `file`, the configured `model`, a Bearer key.
// What it says back decides what happens next: a text is the transcript; a 4xx
// is final (this audio will never be transcribed as asked); a 429, a 5xx or no
// answer is worth asking again later.

import type { Config } from '../config.js';
import type { Audio } from './storage.js';

export interface TranscriberOptions {
  url: string;
  model: string;
  apiKey: string | null;
  timeoutMs?: number;
}

/**
 * The engine a deployment uses: HANDSET_TRANSCRIPTION_URL and _API_KEY when set,
 * else the carrier API's own engine with the carrier's key — read from the
 * carrier settings the platform runs with (dev replaces them with the simulator's).
 */
export function transcriberOptions(config: Config): TranscriberOptions {
  return {
    url: config.transcription.url ?? `${config.telnyx.apiUrl.replace(/\/+$/, '')}/ai/audio/transcriptions`,
    model: config.transcription.model,
    apiKey: config.transcription.apiKey ?? config.telnyx.apiKey,
  };
}

export type TranscriptionAnswer =
  | { ok: true; text: string }
  | { ok: false; final: boolean; detail: string; retryAfterMs: number | null };

const EXTENSIONS: Record<string, string> = { 'audio/wav': 'wav', 'audio/x-wav': 'wav', 'audio/mpeg': 'mp3' };

export async function transcribe(opts: TranscriberOptions, audio: Audio): Promise<TranscriptionAnswer> {
  const form = new FormData();
  const type = audio.contentType.split(';')[0]!.trim();
  form.append('file', new Blob([new Uint8Array(audio.bytes)], { type }), `recording.${EXTENSIONS[type] ?? 'wav'}`);
  form.append('model', opts.model);
  let res: Response;
  let body: string;
  try {
    res = await fetch(opts.url, {
      method: 'POST',
      headers: opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {},
      body: form,
      signal: AbortSignal.timeout(opts.timeoutMs ?? 120_000),
    });
    body = await res.text();
  } catch (err) {
    return { ok: false, final: false, detail: `no answer: ${(err as Error).message}`, retryAfterMs: null };
  }
  if (res.ok) {
    try {
      const text = (JSON.parse(body) as { text?: unknown }).text;
      if (typeof text === 'string') return { ok: true, text };
    } catch {
      // an answer that is not the JSON we asked for: asked again, like a server error
    }
    return { ok: false, final: false, detail: `HTTP ${res.status} without a text`, retryAfterMs: null };
  }
  const detail = `HTTP ${res.status}: ${messageOf(body)}`;
  const retryable = res.status === 429 || res.status >= 500 || res.status === 408;
  const after = Number(res.headers.get('retry-after'));
  return {
    ok: false,
    final: !retryable,
    detail,
    retryAfterMs: Number.isFinite(after) && after > 0 ? after * 1000 : null,
  };
}

/** The error's message as OpenAI-style servers put it, else the start of the body. */
function messageOf(body: string): string {
  try {
    const e = (JSON.parse(body) as { error?: { message?: unknown } | string }).error;
    if (typeof e === 'string') return e;
    if (e && typeof e.message === 'string') return e.message;
  } catch {
    // not JSON
  }
  return body.slice(0, 200);
}
