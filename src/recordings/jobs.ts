// The jobs that make a recording and its transcript, each enqueued in the
// transaction that decided it:
//
// call.record: one record_start per call, its command key derived from the call,
//   so a re-run (a crash, a lost answer) is the same command to the carrier and
//   never a second recording.
// recording.fetch: downloads the audio while the carrier's address is valid
//   (Telnyx's expire after 10 minutes); an expired address is replaced by asking
//   the carrier for a fresh one. The bytes and `stored` commit together, so
//   nothing is half-stored; past its window the audio is `failed` with the reason.
// recording.transcribe: started by the hangup that ended a transcribe call; waits
//   (by time, with a bound) for the audio, sends it to the transcription engine,
//   and writes the transcript with a guarded UPDATE. Only the run that wrote it
//   announces call.transcription.completed and bills the minutes: a run killed
//   between the engine's answer and its commit asks the engine again, and the
//   effect still happens once. A 4xx is final; a 5xx, 429 or no answer is retried
//   per HANDSET_TRANSCRIPTION_RETRY_SCHEDULE.

import type pg from 'pg';
import { bill } from '../billing/usage.sql.js';
import { type Carriers, voiceOf } from '../carrier/registry.js';
import { callById, callLock, legById } from '../calls/calls.sql.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { type RetryPolicy, retryLater } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import type { Logger } from '../telemetry/log.js';
import { announceRecording, recordingFailed } from './recordings.js';
import {
  type RecordingRow,
  recordingAudioFailed,
  recordingAudioStored,
  recordingById,
  recordingsOfCall,
  recordingTranscribed,
  recordingTranscriptionFailed,
} from './recordings.sql.js';
import type { AudioStore } from './storage.js';
import { type TranscriberOptions, transcribe } from './transcriber.js';

export interface RecordingDeps {
  pool: pg.Pool;
  carriers: Carriers;
  log: Logger;
  store: AudioStore;
  transcriber: TranscriberOptions;
  /** Delays before each retry of the transcription engine. */
  transcriptionRetries: readonly number[];
  policies: { command: RetryPolicy };
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

/** How long a fetch keeps trying (fresh addresses included), and a transcription waits for its audio. */
export const FETCH_POLICY: RetryPolicy = { firstDelayMs: 1_000, maxDelayMs: 30_000, giveUpAfterMs: 30 * 60_000 };
export const AUDIO_WAIT_POLICY: RetryPolicy = { firstDelayMs: 1_000, maxDelayMs: 30_000, giveUpAfterMs: 60 * 60_000 };
/** A recording larger than this is not fetched (hours of audio; Telnyx limits a recording's length anyway). */
export const MAX_AUDIO_BYTES = 256 * 1024 * 1024;

const nowOf = (deps: RecordingDeps) => deps.now?.() ?? new Date();

export function recordTask(deps: RecordingDeps): TaskHandler<'call.record'> {
  return async (payload) => {
    const call = await callById(deps.pool, payload.callId);
    if (!call?.record || call.recording_error) return;
    // A completed call is still asked about: its hangup can be applied before this job runs,
    // and the carrier's answer decides. A command it accepted earlier (same command id) is
    // answered as accepted, and its recording comes; otherwise "already ended" is the error
    // (which a saved recording refuses: callRecordingFailed).
    if (call.status !== 'in_progress' && call.status !== 'completed') return;
    // Outbound: the leg that answered; inbound: the caller, bridged to it (both parties are heard).
    const target =
      call.direction === 'inbound'
        ? call.caller_ref
        : call.answered_leg_id
          ? ((await legById(deps.pool, call.answered_leg_id))?.carrier_ref ?? null)
          : null;
    const again = async (retryAfterMs: number | null, detail: string) => {
      await retry(deps, deps.policies.command, 'call.record', payload, jobKeys.record(call.id), retryAfterMs, detail);
    };
    if (!target) return again(null, 'the answered leg is not stamped yet');
    const r = await voiceOf(deps.carriers, call.carrier).callAction(
      target,
      { action: 'record_start', format: 'wav', channels: 'dual' },
      jobKeys.record(call.id),
    );
    if (r.ok && !r.alreadyEnded) return;
    if (!r.ok && r.kind === 'retry') return again(r.retryAfterMs, r.detail);
    const reason = r.ok ? 'the call ended before its recording could start' : `the carrier refused: ${r.detail}`;
    if (!r.ok)
      deps.log.warn({ callId: call.id, code: r.code, detail: r.detail }, 'the carrier refused to record the call');
    await withTx(deps.pool, async (tx) => {
      await callLock(tx, call.id);
      await recordingFailed(tx, call.id, reason, nowOf(deps));
    });
  };
}

export function fetchTask(deps: RecordingDeps): TaskHandler<'recording.fetch'> {
  return async (payload) => {
    const rec = await recordingById(deps.pool, payload.recordingId);
    if (rec?.audio_status !== 'pending') return;
    const url = payload.url ?? (await freshUrl(deps, rec));
    const got = url ? await download(url) : { ok: false as const, expired: true, detail: 'no address for the audio' };
    if (got.ok) {
      await withTx(deps.pool, async (tx) => {
        if (await recordingAudioStored(tx, rec.id)) await deps.store.put(tx, rec.id, got);
      });
      return;
    }
    // An expired address: the next run asks the carrier for a fresh one.
    const next = { ...payload, url: got.expired ? null : payload.url };
    const retried = await retry(
      deps,
      FETCH_POLICY,
      'recording.fetch',
      next,
      jobKeys.fetchAudio(rec.id),
      null,
      got.detail,
    );
    if (!retried) await withTx(deps.pool, (tx) => recordingAudioFailed(tx, rec.id, got.detail));
  };
}

async function freshUrl(deps: RecordingDeps, rec: RecordingRow): Promise<string | null> {
  const found = await voiceOf(deps.carriers, rec.carrier).lookupRecording(rec.carrier_recording_id);
  if (found.ok) return found.audioUrl;
  deps.log.warn({ recordingId: rec.id, detail: found.detail }, 'no fresh address for the recording yet');
  return null;
}

type Downloaded = { ok: true; contentType: string; bytes: Buffer } | { ok: false; expired: boolean; detail: string };

/** The carrier's presigned address: no credentials of ours go with it. */
async function download(url: string): Promise<Downloaded> {
  try {
    const res = await fetch(url, { redirect: 'follow', signal: AbortSignal.timeout(120_000) });
    if (res.status === 403 || res.status === 404 || res.status === 410) {
      await res.body?.cancel();
      return { ok: false, expired: true, detail: `the audio's address answered ${res.status} (expired)` };
    }
    if (!res.ok) {
      await res.body?.cancel();
      return { ok: false, expired: false, detail: `the audio's address answered ${res.status}` };
    }
    const length = Number(res.headers.get('content-length'));
    if (length > MAX_AUDIO_BYTES) {
      await res.body?.cancel();
      return { ok: false, expired: false, detail: `the audio is ${length} bytes, over ${MAX_AUDIO_BYTES}` };
    }
    const bytes = Buffer.from(await res.arrayBuffer());
    if (bytes.length === 0 || bytes.length > MAX_AUDIO_BYTES) {
      return { ok: false, expired: false, detail: `the audio is ${bytes.length} bytes` };
    }
    return { ok: true, contentType: res.headers.get('content-type') ?? 'application/octet-stream', bytes };
  } catch (err) {
    return { ok: false, expired: false, detail: `no answer from the audio's address: ${(err as Error).message}` };
  }
}

export function transcribeTask(deps: RecordingDeps): TaskHandler<'recording.transcribe'> {
  return async (payload) => {
    const key = jobKeys.transcribe(payload.callId);
    const [rec] = await recordingsOfCall(deps.pool, payload.callId);
    if (!rec || rec.audio_status === 'pending') {
      const call = await callById(deps.pool, payload.callId);
      if (call?.recording_error) return; // the carrier said it could not record: nothing will come
      const waiting = await retry(deps, AUDIO_WAIT_POLICY, 'recording.transcribe', payload, key, null, 'no audio yet');
      if (!waiting && rec) await withTx(deps.pool, (tx) => recordingTranscriptionFailed(tx, rec.id, 'no audio came'));
      if (!waiting && !rec) deps.log.warn({ callId: payload.callId }, 'no recording came for a transcribe call');
      return;
    }
    if (rec.transcription_status !== 'pending') return;
    const audio = rec.audio_status === 'stored' ? await deps.store.get(deps.pool, rec.id) : null;
    if (!audio) {
      await withTx(deps.pool, (tx) =>
        recordingTranscriptionFailed(tx, rec.id, `the audio is not available: ${rec.audio_error ?? 'not stored'}`),
      );
      return;
    }
    const answer = await transcribe(deps.transcriber, audio);
    if (answer.ok) {
      await withTx(deps.pool, async (tx) => {
        const done = await recordingTranscribed(tx, rec.id, answer.text);
        if (!done) return;
        const at = nowOf(deps);
        await announceRecording(tx, 'call.transcription.completed', done, at);
        await bill(tx, {
          accountId: done.account_id,
          tenantId: done.tenant_id,
          kind: 'transcription_minute',
          quantity: Math.ceil(done.duration_seconds / 60),
          sourceId: done.id,
          occurredAt: at,
        });
      });
      return;
    }
    const attempt = payload.attempt ?? 1;
    const delay = answer.final ? undefined : deps.transcriptionRetries[attempt - 1];
    if (delay === undefined) {
      const why = answer.final ? answer.detail : `gave up after ${attempt} attempts: ${answer.detail}`;
      await withTx(deps.pool, (tx) => recordingTranscriptionFailed(tx, rec.id, why));
      return;
    }
    deps.log.warn({ recordingId: rec.id, attempt, detail: answer.detail }, 'transcription failed; retrying');
    const runAt = new Date(nowOf(deps).getTime() + Math.max(delay, answer.retryAfterMs ?? 0));
    await withTx(deps.pool, (tx) =>
      enqueue(tx, 'recording.transcribe', { ...payload, attempt: attempt + 1 }, { runAt, jobKey: key }),
    );
  };
}

/** Re-enqueues a job per its policy (jobs/retry.ts), logging when the policy gives up. */
async function retry<K extends 'call.record' | 'recording.fetch' | 'recording.transcribe'>(
  deps: RecordingDeps,
  policy: RetryPolicy,
  task: K,
  payload: GraphileWorker.Tasks[K],
  jobKey: string,
  retryAfterMs: number | null,
  detail: string,
): Promise<boolean> {
  const retried = await retryLater(deps.pool, policy, task, payload, jobKey, { now: nowOf(deps), retryAfterMs });
  if (!retried) deps.log.error({ task, payload, detail }, 'giving up');
  return retried;
}
