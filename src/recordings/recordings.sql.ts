// SQL for recordings and recording_audio. A recording is inserted once per
// carrier recording id (ON CONFLICT DO NOTHING: a duplicate or re-sent webhook
// inserts nothing, and nothing follows). Its audio and its transcript each move
// once, by guarded statements that return the row they changed or nothing:
//
//   audio:         pending ──stored──▶ stored      pending ──failed──▶ failed
//   transcription: none (not asked) | pending ──▶ completed (transcript written once) | failed

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export const AUDIO_STATUSES = ['pending', 'stored', 'failed'] as const;
export type AudioStatus = (typeof AUDIO_STATUSES)[number];
export const TRANSCRIPTION_STATUSES = ['none', 'pending', 'completed', 'failed'] as const;
export type TranscriptionStatus = (typeof TRANSCRIPTION_STATUSES)[number];

export interface RecordingRow {
  id: string;
  account_id: string;
  tenant_id: string | null;
  call_id: string;
  carrier: string;
  carrier_recording_id: string;
  /** The carrier leg that was recorded. */
  carrier_ref: string;
  started_at: Date;
  ended_at: Date;
  duration_seconds: number;
  format: string | null;
  audio_status: AudioStatus;
  audio_error: string | null;
  transcription_status: TranscriptionStatus;
  transcript: string | null;
  transcription_error: string | null;
  created_at: Date;
  sequence: number;
}
const RECORDING_COLUMNS = `id, account_id, tenant_id, call_id, carrier, carrier_recording_id, carrier_ref, started_at,
  ended_at, duration_seconds, format, audio_status, audio_error, transcription_status, transcript, transcription_error,
  created_at, sequence`;
const AUDIO_COLUMNS = 'recording_id, content_type, bytes, created_at';

/** The column lists the rows here are typed from, held to the tables by a test. */
export const RECORDING_TABLE_COLUMNS = { recordings: RECORDING_COLUMNS, recording_audio: AUDIO_COLUMNS };

export interface NewRecording {
  accountId: string;
  tenantId: string | null;
  callId: string;
  carrier: string;
  carrierRecordingId: string;
  carrierRef: string;
  startedAt: Date;
  endedAt: Date;
  durationSeconds: number;
  format: string | null;
  /** Whether its call asked for a transcript: the transcription starts pending. */
  transcribe: boolean;
}

/** Stores the carrier's recording once; null when it is stored already (a duplicate, a re-send). */
export async function recordingInsert(tx: Tx, r: NewRecording): Promise<RecordingRow | null> {
  const { rows } = await tx.query<RecordingRow>({
    name: 'recording_insert',
    text: `INSERT INTO recordings (account_id, tenant_id, call_id, carrier, carrier_recording_id, carrier_ref,
                                   started_at, ended_at, duration_seconds, format, transcription_status)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, CASE WHEN $11 THEN 'pending' ELSE 'none' END)
           ON CONFLICT (carrier, carrier_recording_id) DO NOTHING
           RETURNING ${RECORDING_COLUMNS}`,
    values: [
      r.accountId,
      r.tenantId,
      r.callId,
      r.carrier,
      r.carrierRecordingId,
      r.carrierRef,
      r.startedAt,
      r.endedAt,
      r.durationSeconds,
      r.format,
      r.transcribe,
    ],
  });
  return rows[0] ?? null;
}

export async function recordingById(db: Db, id: string): Promise<RecordingRow | null> {
  const { rows } = await db.query<RecordingRow>({
    name: 'recording_by_id',
    text: `SELECT ${RECORDING_COLUMNS} FROM recordings WHERE id = $1`,
    values: [id],
  });
  return rows[0] ?? null;
}

export async function recordingOfAccount(db: Db, accountId: string, id: string): Promise<RecordingRow | null> {
  const { rows } = await db.query<RecordingRow>({
    name: 'recording_of_account',
    text: `SELECT ${RECORDING_COLUMNS} FROM recordings WHERE id = $1 AND account_id = $2`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

/** A call's recordings, oldest first. */
export async function recordingsOfCall(db: Db, callId: string): Promise<RecordingRow[]> {
  const { rows } = await db.query<RecordingRow>({
    name: 'recordings_of_call',
    text: `SELECT ${RECORDING_COLUMNS} FROM recordings WHERE call_id = $1 ORDER BY id`,
    values: [callId],
  });
  return rows;
}

/** pending → stored, in the transaction that wrote the bytes. */
export async function recordingAudioStored(tx: Tx, id: string): Promise<RecordingRow | null> {
  const { rows } = await tx.query<RecordingRow>({
    name: 'recording_audio_stored',
    text: `UPDATE recordings SET audio_status = 'stored', audio_error = NULL, sequence = sequence + 1
            WHERE id = $1 AND audio_status = 'pending'
            RETURNING ${RECORDING_COLUMNS}`,
    values: [id],
  });
  return rows[0] ?? null;
}

/** pending → failed: the audio could not be fetched while the carrier kept it reachable. */
export async function recordingAudioFailed(tx: Tx, id: string, error: string): Promise<RecordingRow | null> {
  const { rows } = await tx.query<RecordingRow>({
    name: 'recording_audio_failed',
    text: `UPDATE recordings SET audio_status = 'failed', audio_error = $2, sequence = sequence + 1
            WHERE id = $1 AND audio_status = 'pending'
            RETURNING ${RECORDING_COLUMNS}`,
    values: [id, error],
  });
  return rows[0] ?? null;
}

/** The transcript, written once: a second answer (a re-run job) finds it there and changes nothing. */
export async function recordingTranscribed(tx: Tx, id: string, transcript: string): Promise<RecordingRow | null> {
  const { rows } = await tx.query<RecordingRow>({
    name: 'recording_transcribed',
    text: `UPDATE recordings SET transcript = $2, transcription_status = 'completed', transcription_error = NULL,
                                 sequence = sequence + 1
            WHERE id = $1 AND transcript IS NULL AND transcription_status = 'pending'
            RETURNING ${RECORDING_COLUMNS}`,
    values: [id, transcript],
  });
  return rows[0] ?? null;
}

/** pending → failed, with the reason (a 4xx from the engine, retries exhausted, no audio). */
export async function recordingTranscriptionFailed(tx: Tx, id: string, error: string): Promise<RecordingRow | null> {
  const { rows } = await tx.query<RecordingRow>({
    name: 'recording_transcription_failed',
    text: `UPDATE recordings SET transcription_status = 'failed', transcription_error = $2, sequence = sequence + 1
            WHERE id = $1 AND transcription_status = 'pending'
            RETURNING ${RECORDING_COLUMNS}`,
    values: [id, error],
  });
  return rows[0] ?? null;
}

export interface AudioRow {
  recording_id: string;
  content_type: string;
  bytes: Buffer;
  created_at: Date;
}

/** Writes the audio once (a re-run fetch that lost the race writes nothing). */
export async function audioInsert(tx: Tx, recordingId: string, contentType: string, bytes: Buffer): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'recording_audio_insert',
    text: `INSERT INTO recording_audio (recording_id, content_type, bytes) VALUES ($1, $2, $3)
           ON CONFLICT (recording_id) DO NOTHING`,
    values: [recordingId, contentType, bytes],
  });
  return rowCount === 1;
}

export async function audioOf(db: Db, recordingId: string): Promise<AudioRow | null> {
  const { rows } = await db.query<AudioRow>({
    name: 'recording_audio_of',
    text: `SELECT ${AUDIO_COLUMNS} FROM recording_audio WHERE recording_id = $1`,
    values: [recordingId],
  });
  return rows[0] ?? null;
}
