-- A stored carrier event is its own processing job: workers claim unprocessed
-- rows in batches (FOR UPDATE SKIP LOCKED, oldest first) instead of running one
-- queued job per event. `attempts` counts the runs that did not apply (it waited
-- for what it is about, or failed) and `run_after` holds a postponed event back
-- until then. Owned by src/carrier/events.sql.ts.
ALTER TABLE carrier_events ADD COLUMN attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0);
ALTER TABLE carrier_events ADD COLUMN run_after timestamptz;
CREATE INDEX carrier_events_pending ON carrier_events (id) WHERE processed_at IS NULL;
