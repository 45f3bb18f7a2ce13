-- A resource's `sequence`: grows by one with each transition of its row, written
-- by the same guarded statement, and carried in every customer event about it, so
-- a receiver can order the events of one resource however they arrive.
ALTER TABLE messages ADD COLUMN sequence integer NOT NULL DEFAULT 1;
ALTER TABLE calls ADD COLUMN sequence integer NOT NULL DEFAULT 1;
ALTER TABLE webhook_endpoints ADD COLUMN sequence integer NOT NULL DEFAULT 1;
