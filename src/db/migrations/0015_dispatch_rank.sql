-- Fair dispatch between accounts. A queued outbound message carries its place in
-- the dispatch line (`dispatch_rank`), and its dispatch job runs at that priority.
-- An account's waiting messages take consecutive places, so its own keep their
-- order; an account with nothing waiting takes the current round's place, the
-- lowest any waiting message holds. So the job runner takes every account's next
-- message before anyone's following one: a campaign of thousands does not hold up
-- another account's one message, and a campaign started later interleaves with one
-- already waiting instead of going ahead of it. A message leaves the line when it
-- is handed to the carrier (dispatched_at): one whose answer is lost and retried
-- for hours does not keep its account's later messages back. The rank is cleared
-- when the message leaves `queued`, so the indexes hold only the line and a guard
-- on status never matches their predicate. graphile-worker keeps priority in a
-- smallint, and so does this. Owned by src/messages/messages.sql.ts.
ALTER TABLE messages ADD COLUMN dispatch_rank smallint CHECK (dispatch_rank >= 0);
CREATE INDEX messages_dispatch_line ON messages (account_id, dispatch_rank DESC)
  WHERE dispatch_rank IS NOT NULL AND dispatched_at IS NULL;
CREATE INDEX messages_dispatch_round ON messages (dispatch_rank)
  WHERE dispatch_rank IS NOT NULL AND dispatched_at IS NULL;

-- The place a message joining the line takes: one after its account's last waiting
-- message, or the current round when it has none (0 when nobody waits), at most
-- max_rank. A function for the planner settings it carries: each lookup reads one
-- end of an index, one entry however long the line. Planned freely inside a
-- prepared insert, the lookup kept a plan made while the table was small and read
-- every queued message of the account (a sequential scan; 2,005 rows for a line
-- of 2,005). Without a sequential scan, a bitmap or a sort, an index's order is
-- the only way left.
CREATE FUNCTION messages_next_dispatch_rank(account text, max_rank int) RETURNS smallint
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
  SELECT least(greatest(
           coalesce((SELECT dispatch_rank FROM messages
                      WHERE dispatch_rank IS NOT NULL AND dispatched_at IS NULL
                      ORDER BY dispatch_rank
                      LIMIT 1), 0),
           coalesce((SELECT dispatch_rank + 1 FROM messages
                      WHERE account_id = account AND dispatch_rank IS NOT NULL AND dispatched_at IS NULL
                      ORDER BY dispatch_rank DESC
                      LIMIT 1), 0)),
         max_rank)::smallint
$$;
