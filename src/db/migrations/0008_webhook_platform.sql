-- Webhook signing secrets, sealed with HANDSET_SECRET_KEY (never stored in
-- clear), several per endpoint while rotations overlap: the current one
-- (expires_at NULL) and each earlier one until its 24 h end. Owned by src/delivery.
CREATE TABLE webhook_endpoint_secrets (
  id          text PRIMARY KEY DEFAULT handset_id('whs'),
  endpoint_id text NOT NULL REFERENCES webhook_endpoints (id),
  sealed      text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz
);
CREATE UNIQUE INDEX webhook_endpoint_secrets_current ON webhook_endpoint_secrets (endpoint_id) WHERE expires_at IS NULL;
CREATE INDEX webhook_endpoint_secrets_endpoint ON webhook_endpoint_secrets (endpoint_id, created_at);

-- The secrets stored in clear until now move here marked `clear:`; the first
-- process to start with HANDSET_SECRET_KEY seals them. A deleted endpoint's
-- secrets are not kept.
INSERT INTO webhook_endpoint_secrets (endpoint_id, sealed, created_at, expires_at)
  SELECT id, 'clear:' || secret, created_at, NULL FROM webhook_endpoints WHERE deleted_at IS NULL;
INSERT INTO webhook_endpoint_secrets (endpoint_id, sealed, created_at, expires_at)
  SELECT id, 'clear:' || previous_secret, updated_at, previous_secret_expires_at FROM webhook_endpoints
   WHERE deleted_at IS NULL AND previous_secret IS NOT NULL AND previous_secret_expires_at > now();
ALTER TABLE webhook_endpoints DROP COLUMN secret;
ALTER TABLE webhook_endpoints DROP COLUMN previous_secret;
ALTER TABLE webhook_endpoints DROP COLUMN previous_secret_expires_at;

-- Circuit breaker: an endpoint whose last attempt timed out gets a short timeout
-- and one lane until it answers again. The last failure is what the
-- webhook_endpoint.disabled event reports.
ALTER TABLE webhook_endpoints ADD COLUMN timing_out boolean NOT NULL DEFAULT false;
ALTER TABLE webhook_endpoints ADD COLUMN last_failure jsonb;

-- Attempts a recovery or a test made, besides the schedule and redeliveries.
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_trigger_check;
ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_trigger_check
  CHECK (trigger IN ('scheduled', 'redeliver', 'recover'));

-- A customer's "re-send everything that failed since": one row per request,
-- worked through oldest first by a job that keeps its place in `cursor_*`. At most
-- one runs per endpoint. Owned by src/delivery.
CREATE TABLE webhook_recoveries (
  id                  text PRIMARY KEY DEFAULT handset_id('rcv'),
  account_id          text NOT NULL REFERENCES accounts (id),
  endpoint_id         text NOT NULL REFERENCES webhook_endpoints (id),
  since               timestamptz NOT NULL,
  status              text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'stopped')),
  cursor_occurred_at  timestamptz,
  cursor_delivery_id  text,
  resent              integer NOT NULL DEFAULT 0,
  stopped_reason      text,
  created_at          timestamptz NOT NULL DEFAULT now(),
  finished_at         timestamptz
);
CREATE UNIQUE INDEX webhook_recoveries_running ON webhook_recoveries (endpoint_id) WHERE status = 'running';
CREATE INDEX webhook_recoveries_account ON webhook_recoveries (account_id, created_at);
CREATE INDEX webhook_deliveries_endpoint_unsent ON webhook_deliveries (endpoint_id) WHERE status IN ('failed', 'skipped');
