// Where recordings' audio is kept. PostgreSQL by default (recording_audio, in the
// transaction that marks the audio stored), so a deployment with only PostgreSQL
// keeps only PostgreSQL. Another store (an S3-compatible bucket) implements the
// same two calls; it would write before that transaction and name the object by
// the recording id, so a re-run overwrites the same object instead of adding one.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import { audioInsert, audioOf } from './recordings.sql.js';

export interface Audio {
  contentType: string;
  bytes: Buffer;
}

export interface AudioStore {
  /** Keeps a recording's audio; a second put for the same recording keeps the first. */
  put(tx: Tx, recordingId: string, audio: Audio): Promise<void>;
  get(db: Db, recordingId: string): Promise<Audio | null>;
}

export const postgresAudioStore: AudioStore = {
  async put(tx, recordingId, audio) {
    await audioInsert(tx, recordingId, audio.contentType, audio.bytes);
  },
  async get(db, recordingId) {
    const row = await audioOf(db, recordingId);
    return row ? { contentType: row.content_type, bytes: row.bytes } : null;
  },
};
