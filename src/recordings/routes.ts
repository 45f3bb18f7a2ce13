// Customer API for recordings: a call's recordings, one recording with its
// transcript, and its audio (served from our store: the carrier's addresses
// expire within minutes).

import { Type } from 'typebox';
import { named, Nullable, Sequence, Time } from '../api/fields.js';
import { ok } from '../api/openapi.js';
import { ApiError, notFound } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { callOfAccount } from '../calls/calls.sql.js';
import type { EventSchemas } from '../outbox/outbox.sql.js';
import { recordingResource } from './recordings.js';
import { AUDIO_STATUSES, recordingOfAccount, recordingsOfCall, TRANSCRIPTION_STATUSES } from './recordings.sql.js';
import type { AudioStore } from './storage.js';

const Recording = named(
  'Recording',
  Type.Object({
    id: Type.String(),
    call_id: Type.String(),
    status: Type.Literal('saved', {
      description: 'saved: the carrier made the recording (its audio and transcript have their own statuses)',
    }),
    duration_seconds: Type.Integer({ description: "the carrier's length of the recording, rounded up" }),
    started_at: Time,
    ended_at: Time,
    format: Nullable(Type.String()),
    audio_status: named('RecordingAudioStatus', Type.Enum([...AUDIO_STATUSES])),
    audio_error: Nullable(Type.String()),
    transcription_status: named('TranscriptionStatus', Type.Enum([...TRANSCRIPTION_STATUSES])),
    transcript: Nullable(Type.String()),
    transcription_error: Nullable(Type.String()),
    tenant_id: Nullable(Type.String()),
    created_at: Time,
    sequence: Sequence,
  }),
);

/** The events about a recording: each carries the recording (with its call_id) as it is after the change. */
export const recordingEvents = {
  'call.recording.saved': Recording,
  'call.transcription.completed': Recording,
} as const satisfies EventSchemas;

const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) });

export function recordingRoutes(store: AudioStore): ApiRoutes {
  return (app, ctx) => {
    const tags = ['Recordings'];
    app.get(
      '/calls/:id/recordings',
      {
        schema: {
          tags,
          operationId: 'listCallRecordings',
          summary: "A call's recordings, oldest first",
          params: IdParams,
          response: {
            200: ok("The call's recordings", Type.Object({ data: Type.Array(Recording), has_more: Type.Boolean() })),
          },
        },
      },
      async (req) => {
        const call = await callOfAccount(ctx.pool, req.principal.accountId, req.params.id);
        if (!call) throw notFound('call');
        return { data: (await recordingsOfCall(ctx.pool, call.id)).map(recordingResource), has_more: false };
      },
    );

    app.get(
      '/recordings/:id',
      {
        schema: {
          tags,
          operationId: 'getRecording',
          summary: 'Get a recording, with its transcript',
          params: IdParams,
          response: { 200: ok('The recording', Recording) },
        },
      },
      async (req) => {
        const r = await recordingOfAccount(ctx.pool, req.principal.accountId, req.params.id);
        if (!r) throw notFound('recording');
        return recordingResource(r);
      },
    );

    app.get(
      '/recordings/:id/audio',
      {
        schema: {
          tags,
          operationId: 'getRecordingAudio',
          summary: "The recording's audio, as the carrier made it (409 until it is stored)",
          params: IdParams,
          response: {
            200: {
              description: 'The audio',
              content: { 'audio/wav': { schema: Type.String({ format: 'binary' }) } },
            },
          },
        },
      },
      async (req, reply) => {
        const r = await recordingOfAccount(ctx.pool, req.principal.accountId, req.params.id);
        if (!r) throw notFound('recording');
        const audio = r.audio_status === 'stored' ? await store.get(ctx.pool, r.id) : null;
        if (!audio) {
          throw new ApiError(
            409,
            'recording_audio_unavailable',
            r.audio_status === 'failed'
              ? `The audio could not be fetched from the carrier: ${r.audio_error}`
              : 'The audio is still being fetched from the carrier; try again shortly',
          );
        }
        return (
          reply
            .header('content-type', audio.contentType)
            .header('content-length', audio.bytes.length)
            .header('cache-control', 'private, no-store')
            // The schema documents binary audio as a string (OpenAPI's way); the bytes go out as they are.
            .send(audio.bytes as unknown as string)
        );
      },
    );
  };
}
