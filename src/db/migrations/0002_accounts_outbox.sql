-- Accounts, optional tenants (sub-accounts), API keys. Owned by src/accounts.
CREATE TABLE accounts (
  id         text PRIMARY KEY DEFAULT handset_id('acct'),
  name       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tenants (
  id         text PRIMARY KEY DEFAULT handset_id('ten'),
  account_id text NOT NULL REFERENCES accounts (id),
  name       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (account_id, id)
);

-- A key is shown once; we keep its public prefix (to find it) and a SHA-256 of
-- the whole key (to compare in constant time).
CREATE TABLE api_keys (
  id          text PRIMARY KEY DEFAULT handset_id('key'),
  account_id  text NOT NULL REFERENCES accounts (id),
  prefix      text NOT NULL UNIQUE,
  secret_hash bytea NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);

-- Stored responses of POST creates, per account and Idempotency-Key; written in
-- the same transaction as the resource they describe. Owned by src/api/idempotency.ts.
CREATE TABLE idempotency_keys (
  account_id      text NOT NULL REFERENCES accounts (id),
  key             text NOT NULL,
  request_hash    text NOT NULL,
  response_status integer NOT NULL,
  response_body   jsonb NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);

-- Numbers an account owns; they route inbound SMS and calls. Owned by src/numbers.
CREATE TABLE phone_numbers (
  id                text PRIMARY KEY DEFAULT handset_id('num'),
  account_id        text NOT NULL REFERENCES accounts (id),
  tenant_id         text,
  number            text NOT NULL UNIQUE CHECK (number ~ '^\+[1-9][0-9]{1,14}$'),
  inbound_ring      text[] NOT NULL DEFAULT '{}',
  ring_timeout_secs integer NOT NULL DEFAULT 20 CHECK (ring_timeout_secs BETWEEN 5 AND 120),
  created_at        timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (account_id, tenant_id) REFERENCES tenants (account_id, id)
);
CREATE INDEX phone_numbers_account ON phone_numbers (account_id, id DESC);

-- The outbox: one row per customer event, written in the transaction of the
-- transition that earned it. Its id is the webhook-id on every attempt. Owned by src/outbox.
CREATE TABLE outbound_events (
  id          text PRIMARY KEY DEFAULT handset_id('evt'),
  account_id  text NOT NULL REFERENCES accounts (id),
  tenant_id   text,
  type        text NOT NULL,
  subject_id  text NOT NULL,
  data        jsonb NOT NULL,
  occurred_at timestamptz NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbound_events_account ON outbound_events (account_id, id DESC);
CREATE INDEX outbound_events_subject ON outbound_events (subject_id);

-- Customer webhook endpoints, their deliveries (one per event and subscribed
-- endpoint) and each HTTP attempt of a delivery. Owned by src/delivery.
CREATE TABLE webhook_endpoints (
  id                         text PRIMARY KEY DEFAULT handset_id('ep'),
  account_id                 text NOT NULL REFERENCES accounts (id),
  url                        text NOT NULL,
  description                text,
  event_types                text[] NOT NULL DEFAULT '{}', -- empty: every type
  secret                     text NOT NULL,
  previous_secret            text,
  previous_secret_expires_at timestamptz,
  enabled                    boolean NOT NULL DEFAULT true,
  disabled_reason            text,
  disabled_at                timestamptz,
  consecutive_failures       integer NOT NULL DEFAULT 0,
  created_at                 timestamptz NOT NULL DEFAULT now(),
  updated_at                 timestamptz NOT NULL DEFAULT now(),
  deleted_at                 timestamptz
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE webhook_deliveries (
  id              text PRIMARY KEY DEFAULT handset_id('dlv'),
  event_id        text NOT NULL REFERENCES outbound_events (id),
  endpoint_id     text NOT NULL REFERENCES webhook_endpoints (id),
  status          text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'skipped')),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  UNIQUE (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_endpoint_pending ON webhook_deliveries (endpoint_id) WHERE status = 'pending';

CREATE TABLE webhook_attempts (
  id               text PRIMARY KEY DEFAULT handset_id('att'),
  delivery_id      text NOT NULL REFERENCES webhook_deliveries (id),
  attempt          integer NOT NULL,
  trigger          text NOT NULL CHECK (trigger IN ('scheduled', 'redeliver')),
  url              text NOT NULL,
  started_at       timestamptz NOT NULL,
  duration_ms      integer NOT NULL,
  response_status  integer,
  response_excerpt text,
  error            text,
  UNIQUE (delivery_id, attempt)
);
