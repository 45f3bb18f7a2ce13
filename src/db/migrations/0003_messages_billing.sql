-- Messages, outbound and inbound. One row per (carrier, carrier message id): an
-- inbound SMS replayed any number of ways is one message. Owned by src/messages.
CREATE TABLE messages (
  id                 text PRIMARY KEY DEFAULT handset_id('msg'),
  account_id         text NOT NULL REFERENCES accounts (id),
  tenant_id          text,
  direction          text NOT NULL CHECK (direction IN ('outbound', 'inbound')),
  from_number        text NOT NULL,
  to_number          text NOT NULL,
  body               text,
  media_urls         text[] NOT NULL DEFAULT '{}',
  status             text NOT NULL CHECK (status IN ('scheduled', 'queued', 'sent', 'delivered', 'failed', 'canceled', 'received')),
  encoding           text NOT NULL CHECK (encoding IN ('GSM-7', 'UCS-2', 'MMS')),
  segments           integer NOT NULL CHECK (segments >= 1),
  error_code         text,
  carrier            text NOT NULL DEFAULT 'telnyx',
  carrier_message_id text,
  send_at            timestamptz,
  created_at         timestamptz NOT NULL DEFAULT now(),
  sent_at            timestamptz,
  completed_at       timestamptz,
  UNIQUE (carrier, carrier_message_id)
);
CREATE INDEX messages_account ON messages (account_id, id DESC);

-- Every word about a message that reached us — API, dispatcher, each carrier
-- receipt — with whether it changed the message, so support can answer "why is
-- this message delivered". Owned by src/messages.
CREATE TABLE message_status_history (
  id               text PRIMARY KEY DEFAULT handset_id('msh'),
  message_id       text NOT NULL REFERENCES messages (id),
  source           text NOT NULL CHECK (source IN ('api', 'dispatch', 'carrier')),
  carrier_event_id text,
  status           text NOT NULL,
  carrier_status   text,
  error_code       text,
  effect           text NOT NULL CHECK (effect IN ('applied', 'refused', 'informational')),
  note             text,
  occurred_at      timestamptz NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX message_status_history_message ON message_status_history (message_id, occurred_at);

-- The billing ledger. A row is written in the same transaction as the guarded
-- transition that made something billable, so it inherits exactly-once from that
-- guard; there is deliberately no dedupe of its own. Owned by src/billing.
CREATE TABLE usage_records (
  id          text PRIMARY KEY DEFAULT handset_id('usg'),
  account_id  text NOT NULL REFERENCES accounts (id),
  tenant_id   text,
  kind        text NOT NULL CHECK (kind IN ('sms_segment_outbound', 'sms_segment_inbound', 'mms_outbound', 'mms_inbound', 'call_minute')),
  quantity    integer NOT NULL CHECK (quantity >= 0),
  source_id   text NOT NULL,
  occurred_at timestamptz NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_records_account ON usage_records (account_id, occurred_at);
CREATE INDEX usage_records_source ON usage_records (source_id);
