-- A carrier's "slow down": when it answered a send 429 (Telnyx 10011/40011,
-- Twilio 20429), no request is made to it until `throttled_until` (its
-- Retry-After, or its rate limit's reset), by any worker process. Nothing was
-- processed, so nothing fails and nothing fails over: the messages wait in the
-- line. Owned by src/carrier/health.sql.ts.
ALTER TABLE carrier_health ADD COLUMN throttled_until timestamptz;
