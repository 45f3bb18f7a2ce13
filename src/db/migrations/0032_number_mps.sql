-- An optional sending rate per number: at most `mps` messages a second leave it,
-- across every worker process. The pace is kept here, not in a process: one row
-- per paced number holds the time its next message may go (`next_at`, a GCRA's
-- theoretical arrival time); a dispatcher takes k slots in one guarded statement
-- (next_at moves on by k / mps seconds from now or from where it was, whichever
-- is later) and sends each at its slot. A slot taken and not used (a dispatcher
-- that died) is lost: the rate can fall short of mps, never go above it.
-- Owned by src/numbers/numbers.sql.ts (mps) and src/numbers/pace.sql.ts.
ALTER TABLE phone_numbers ADD COLUMN mps integer CHECK (mps BETWEEN 1 AND 1000);
CREATE TABLE number_pace (
  carrier  text NOT NULL,
  number   text NOT NULL,
  next_at  timestamptz NOT NULL,
  PRIMARY KEY (carrier, number)
);
