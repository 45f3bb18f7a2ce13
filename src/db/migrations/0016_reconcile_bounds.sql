-- The bounds reconciliation ran with (HANDSET_RECONCILE_INTERVAL, HANDSET_RECONCILE_AFTER,
-- HANDSET_RECONCILE_MESSAGE_AFTER), as the workers recorded them: one row per setting, with
-- when a worker first had it and when one last had it in force (its start, or a pass it
-- ran). `handset audit` judges how long anything may wait for the carrier by these, the
-- bounds of the servers that wrote the database, not by its own configuration; servers
-- with different settings over time are each judged for the time they ran. Owned by
-- src/reconcile/bounds.sql.ts.
CREATE TABLE reconcile_bounds (
  interval_ms bigint NOT NULL CHECK (interval_ms > 0),
  after_ms bigint NOT NULL CHECK (after_ms > 0),
  message_after_ms bigint NOT NULL CHECK (message_after_ms > 0),
  first_seen_at timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL,
  PRIMARY KEY (interval_ms, after_ms, message_after_ms)
);
