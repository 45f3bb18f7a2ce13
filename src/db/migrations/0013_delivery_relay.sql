-- A delivery's first attempt to a healthy endpoint is its own job: workers claim
-- due rows in batches (FOR UPDATE SKIP LOCKED) instead of running one queued job
-- per delivery. `relay_after` is when the relay may take the row: set by the
-- fan-out, moved past the attempt's deadline (a lease) by the claim, and cleared
-- by whatever moves the delivery on (its outcome, a retry's job, a lane's job).
-- A worker that dies holding a lease leaves the row to be claimed again when it
-- runs out. Owned by src/delivery/deliveries.sql.ts.
ALTER TABLE webhook_deliveries ADD COLUMN relay_after timestamptz;
CREATE INDEX webhook_deliveries_relay ON webhook_deliveries (relay_after, id) WHERE relay_after IS NOT NULL;
