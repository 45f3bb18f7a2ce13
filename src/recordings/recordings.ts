// Recordings of calls, as carrier events make them: `recording.saved` inserts
// the recording once per carrier recording id, and only that insert announces
// it (call.recording.saved), bills its minutes (recording_minute, the ceiling of
// the carrier's duration) and enqueues the fetch of its audio while the carrier's
// address is still valid — all in the event's transaction. A duplicate or a
// re-send under a new event id finds the row and does nothing. `recording.failed`
// notes the carrier's reason on the call once, and announces it.

import { bill } from '../billing/usage.sql.js';
import type { HandlerRegistry } from '../carrier/process.js';
import { callResource } from '../calls/calls.js';
import { callRecordingFailed, legsOf } from '../calls/calls.sql.js';
import { callOfCarrierLeg, notYet } from '../calls/handlers.js';
import type { Tx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { emit } from '../outbox/outbox.js';
import { type RecordingRow, recordingInsert } from './recordings.sql.js';

export function recordingResource(r: RecordingRow) {
  return {
    id: r.id,
    call_id: r.call_id,
    status: 'saved' as const,
    duration_seconds: r.duration_seconds,
    started_at: r.started_at.toISOString(),
    ended_at: r.ended_at.toISOString(),
    format: r.format,
    audio_status: r.audio_status,
    audio_error: r.audio_error,
    transcription_status: r.transcription_status,
    transcript: r.transcript,
    transcription_error: r.transcription_error,
    tenant_id: r.tenant_id,
    created_at: r.created_at.toISOString(),
    sequence: r.sequence,
  };
}

/** Announces a recording's change (saved, transcribed) with the recording as it is now. */
export function announceRecording(
  tx: Tx,
  type: 'call.recording.saved' | 'call.transcription.completed',
  r: RecordingRow,
  occurredAt: Date,
) {
  return emit(tx, {
    accountId: r.account_id,
    tenantId: r.tenant_id,
    type,
    subjectId: r.id,
    data: recordingResource(r),
    occurredAt,
  });
}

export const recordingHandlers: HandlerRegistry = {
  'recording.saved': async (tx, ev, ctx) => {
    const found = await callOfCarrierLeg(tx, ctx.carrier, ev);
    if (!found) return notYet(ctx, `no call has carrier leg ${ev.leg} yet`);
    const { call } = found;
    if (!call.record) return { outcome: 'ignored', reason: 'this call did not ask to be recorded' };
    const durationSeconds = Math.max(0, Math.ceil((ev.endedAt.getTime() - ev.startedAt.getTime()) / 1000));
    const r = await recordingInsert(tx, {
      accountId: call.account_id,
      tenantId: call.tenant_id,
      callId: call.id,
      carrier: ctx.carrier,
      carrierRecordingId: ev.recordingId,
      carrierRef: ev.leg,
      startedAt: ev.startedAt,
      endedAt: ev.endedAt,
      durationSeconds,
      format: ev.format,
      transcribe: call.transcribe,
    });
    if (!r) return { outcome: 'ignored', reason: 'this recording is stored already' };
    await announceRecording(tx, 'call.recording.saved', r, ev.occurredAt);
    await bill(tx, {
      accountId: r.account_id,
      tenantId: r.tenant_id,
      kind: 'recording_minute',
      quantity: Math.ceil(durationSeconds / 60),
      sourceId: r.id,
      occurredAt: ev.endedAt,
    });
    await enqueue(
      tx,
      'recording.fetch',
      { recordingId: r.id, url: ev.audioUrl, since: ev.occurredAt.toISOString() },
      { jobKey: jobKeys.fetchAudio(r.id) },
    );
    return { outcome: 'applied' };
  },

  'recording.failed': async (tx, ev, ctx) => {
    const found = await callOfCarrierLeg(tx, ctx.carrier, ev);
    if (!found) return notYet(ctx, `no call has carrier leg ${ev.leg} yet`);
    return (await recordingFailed(tx, found.call.id, ev.reason, ev.occurredAt))
      ? { outcome: 'applied' }
      : { outcome: 'ignored', reason: 'the recording error is noted already' };
  },
};

/**
 * The call will have no recording (the carrier's error, or the call ended before
 * recording could start): noted on the call once, with one call.recording.failed.
 */
export async function recordingFailed(tx: Tx, callId: string, reason: string, at: Date): Promise<boolean> {
  const failed = await callRecordingFailed(tx, callId, reason);
  if (!failed) return false;
  await emit(tx, {
    accountId: failed.account_id,
    tenantId: failed.tenant_id,
    type: 'call.recording.failed',
    subjectId: failed.id,
    data: callResource(failed, await legsOf(tx, failed.id)),
    occurredAt: at,
  });
  return true;
}
