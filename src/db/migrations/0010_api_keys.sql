-- API keys an account manages itself (GET/POST /v1/api_keys, DELETE, roll). Owned
-- by src/accounts. A key may carry a name; last_used_at is bookkeeping written at
-- most once a minute per key (never a write per request); expires_at is set when a
-- key is rolled (the old one keeps working until then) and NULL for a key that lasts.
ALTER TABLE api_keys ADD COLUMN name text CHECK (char_length(name) BETWEEN 1 AND 200);
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
-- The account's keys, newest first (its list), and its live ones (the last-key guard).
CREATE INDEX api_keys_account ON api_keys (account_id, id DESC) WHERE revoked_at IS NULL;
