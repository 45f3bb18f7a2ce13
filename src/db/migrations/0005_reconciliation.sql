-- When the carrier goes silent, ask it. Owned by src/carrier (carrier_events),
-- src/calls (call_legs, calls, carrier_leg_endings) and src/messages (messages,
-- message_status_history).

-- The carrier resource an event is about (a call leg's control id, a message id),
-- as the carrier adapter reads it from the envelope at ingest. Only events still
-- waiting to be processed are indexed: it answers "is a word about this leg stored
-- but not yet applied?", which a hangup that overtook its answer must never
-- ignore, however long that answer takes to be processed.
ALTER TABLE carrier_events ADD COLUMN subject text;
CREATE INDEX carrier_events_pending_subject ON carrier_events (carrier, subject) WHERE processed_at IS NULL;

-- When the carrier was last asked about a leg, an inbound caller or a message
-- (reconciliation), so each is asked again only after the interval; and which of
-- a leg's facts came from such a lookup rather than from a webhook.
ALTER TABLE call_legs ADD COLUMN checked_at timestamptz;
ALTER TABLE call_legs ADD COLUMN reconciled text[] NOT NULL DEFAULT '{}';
ALTER TABLE calls ADD COLUMN caller_checked_at timestamptz;
ALTER TABLE calls ADD COLUMN caller_reconciled boolean NOT NULL DEFAULT false;
ALTER TABLE messages ADD COLUMN checked_at timestamptz;

-- A receipt learned from a lookup says so in the message's history.
ALTER TABLE message_status_history DROP CONSTRAINT message_status_history_source_check;
ALTER TABLE message_status_history ADD CONSTRAINT message_status_history_source_check
  CHECK (source IN ('api', 'dispatch', 'carrier', 'reconciliation'));

-- A hangup about a carrier leg that is no call of ours (yet): an inbound caller who
-- hung up before their call.initiated was processed. The initiated handler honours
-- it whenever that event comes, so the call is created missed instead of ringing
-- targets for a caller who is gone.
CREATE TABLE carrier_leg_endings (
  carrier          text NOT NULL,
  call_control_id  text NOT NULL,
  ended_at         timestamptz NOT NULL,
  hangup_cause     text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (carrier, call_control_id)
);

-- Reconciliation finds waiting resources by these.
CREATE INDEX call_legs_open ON call_legs (checked_at NULLS FIRST) WHERE ended_at IS NULL AND call_control_id IS NOT NULL;
CREATE INDEX calls_open_inbound ON calls (caller_checked_at NULLS FIRST)
  WHERE ended_at IS NULL AND caller_call_control_id IS NOT NULL;
CREATE INDEX messages_sent_unfinished ON messages (sent_at) WHERE status = 'sent';
