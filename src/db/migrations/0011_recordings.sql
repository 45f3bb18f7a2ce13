-- Call recording and transcription. A call (and a number's inbound plan) says
-- whether to record the answered call and whether to transcribe it; transcribe
-- implies record. Owned by src/calls (the flags) and src/recordings (the rest).
ALTER TABLE calls ADD COLUMN record boolean NOT NULL DEFAULT false;
ALTER TABLE calls ADD COLUMN transcribe boolean NOT NULL DEFAULT false;
ALTER TABLE calls ADD CONSTRAINT calls_transcribe_needs_record CHECK (record OR NOT transcribe);
-- The carrier's reason when it could not record the call (call.recording.error).
ALTER TABLE calls ADD COLUMN recording_error text;
ALTER TABLE phone_numbers ADD COLUMN inbound_record boolean NOT NULL DEFAULT false;
ALTER TABLE phone_numbers ADD COLUMN inbound_transcribe boolean NOT NULL DEFAULT false;
ALTER TABLE phone_numbers ADD CONSTRAINT phone_numbers_transcribe_needs_record
  CHECK (inbound_record OR NOT inbound_transcribe);

-- One row per carrier recording (inserted ON CONFLICT DO NOTHING: the
-- webhook's duplicates and re-sends find it there). Its audio is fetched while
-- the carrier's address is still valid (audio_status), and a transcribe call's
-- transcript is written once (transcript IS NULL is the guard).
CREATE TABLE recordings (
  id                   text PRIMARY KEY DEFAULT handset_id('rec'),
  account_id           text NOT NULL REFERENCES accounts (id),
  tenant_id            text,
  call_id              text NOT NULL REFERENCES calls (id),
  carrier              text NOT NULL,
  carrier_recording_id text NOT NULL,
  carrier_ref          text NOT NULL,
  started_at           timestamptz NOT NULL,
  ended_at             timestamptz NOT NULL,
  duration_seconds     integer NOT NULL CHECK (duration_seconds >= 0),
  format               text,
  audio_status         text NOT NULL DEFAULT 'pending' CHECK (audio_status IN ('pending', 'stored', 'failed')),
  audio_error          text,
  transcription_status text NOT NULL DEFAULT 'none'
                       CHECK (transcription_status IN ('none', 'pending', 'completed', 'failed')),
  transcript           text,
  transcription_error  text,
  created_at           timestamptz NOT NULL DEFAULT now(),
  sequence             integer NOT NULL DEFAULT 1,
  UNIQUE (carrier, carrier_recording_id)
);
CREATE INDEX recordings_call ON recordings (call_id, id);
CREATE INDEX recordings_account ON recordings (account_id, id DESC);

-- The audio itself, in PostgreSQL by default (a deployment with only
-- PostgreSQL keeps only PostgreSQL); src/recordings/storage.ts is the seam for
-- another store. Written once, in the transaction that marks the audio stored.
CREATE TABLE recording_audio (
  recording_id text PRIMARY KEY REFERENCES recordings (id),
  content_type text NOT NULL,
  bytes        bytea NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE usage_records DROP CONSTRAINT usage_records_kind_check;
ALTER TABLE usage_records ADD CONSTRAINT usage_records_kind_check
  CHECK (kind IN ('sms_segment_outbound', 'sms_segment_inbound', 'mms_outbound', 'mms_inbound', 'call_minute',
                  'recording_minute', 'transcription_minute'));
