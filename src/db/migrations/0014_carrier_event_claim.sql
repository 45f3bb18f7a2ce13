-- The carrier-event relay's claim (carrierEventClaim in src/carrier/events.sql.ts,
-- which owns it) as a function, for the planner settings it carries: a claim walks
-- the pending index in id order from its floor and stops at its limit, whatever the
-- statistics say. Planned freely, a claim on statistics that say few events are
-- pending (a young table, or one analyzed before a burst) read every pending event
-- and sorted them: all 5,000 of a backlog for a claim of 50, each batch. Without a
-- sequential scan, a bitmap or a sort, the index's order is the only way left.
CREATE FUNCTION carrier_events_due(due_at timestamptz, max_rows int, from_id text) RETURNS SETOF carrier_events
LANGUAGE sql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
  SELECT * FROM carrier_events
   WHERE processed_at IS NULL AND (run_after IS NULL OR run_after <= due_at) AND id >= from_id
   ORDER BY id
   LIMIT max_rows
     FOR UPDATE SKIP LOCKED
$$;
