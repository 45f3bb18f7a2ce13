-- Two carriers, and failover between them that never sends twice. Owned by
-- src/messages (messages.fallback_*, message_sends, the history's carrier) and
-- src/carrier (carrier_health).

-- A message may name a second number of its account, on another carrier, to be
-- sent from when its own carrier certainly did not take it. `failover_reason`
-- says why it was (null: it was not); from_number and carrier then name what sent it.
ALTER TABLE messages ADD COLUMN fallback_from text;
ALTER TABLE messages ADD COLUMN fallback_carrier text;
ALTER TABLE messages ADD COLUMN failover_reason text;
ALTER TABLE messages ADD COLUMN failed_over_from text;
ALTER TABLE messages ADD COLUMN failed_over_carrier text;
ALTER TABLE messages ADD CONSTRAINT messages_fallback_whole
  CHECK ((fallback_from IS NULL) = (fallback_carrier IS NULL));

-- Which carrier each word in a message's history is about.
ALTER TABLE message_status_history ADD COLUMN carrier text;

-- One row per request a message made of a carrier, or chose not to make (the
-- carrier was marked down), with what became of it. Written before the request
-- when the carrier takes no idempotency key or the message may fail over, so a
-- worker that dies mid-request leaves `pending`: an outcome nobody knows yet.
CREATE TABLE message_sends (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id     text NOT NULL REFERENCES messages (id),
  carrier        text NOT NULL,
  from_number    text NOT NULL,
  outcome        text NOT NULL CHECK (outcome IN ('pending', 'accepted', 'not_accepted', 'unknown', 'rejected')),
  carrier_message_id text,
  detail         text,
  started_at     timestamptz NOT NULL,
  settled_at     timestamptz
);
CREATE INDEX message_sends_message ON message_sends (message_id);

-- Each carrier's health, shared by every worker process: `down` after refusals
-- in a row (no request is made to it), `probing` while one request tries it again.
CREATE TABLE carrier_health (
  carrier      text PRIMARY KEY,
  state        text NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'down', 'probing')),
  refusals     integer NOT NULL DEFAULT 0,
  changed_at   timestamptz NOT NULL DEFAULT now(),
  probe_until  timestamptz,
  last_refusal text
);

-- A carrier that hands back a marker we gave a send (Twilio keeps the
-- StatusCallback URL, with our message id, per message) has it stored as
-- payload.handset_message: a send whose answer was lost is found by its callbacks.
CREATE INDEX carrier_events_handset_message ON carrier_events ((payload ->> 'handset_message'))
  WHERE payload ? 'handset_message';
