-- Fair dispatch between accounts. A queued outbound message carries its place in
-- its account's backlog: 0 for the first while the account has nothing queued,
-- then one more than the account's last queued message. Its dispatch job runs at
-- that priority, so the job runner takes every account's first message before
-- anyone's second: a campaign of thousands does not hold up another account's one
-- message, and an account's own messages keep their order. The rank is cleared
-- when the message leaves `queued`, so the index holds only backlogs and a guard
-- on status never matches its predicate. graphile-worker keeps priority in a
-- smallint, and so does this. Owned by src/messages/messages.sql.ts.
ALTER TABLE messages ADD COLUMN dispatch_rank smallint CHECK (dispatch_rank >= 0);
CREATE INDEX messages_dispatch_backlog ON messages (account_id, dispatch_rank DESC) WHERE dispatch_rank IS NOT NULL;

-- The next place in an account's backlog, as a function for the planner settings
-- it carries: it reads the backlog index from its newest end, one entry however
-- deep the backlog. Planned freely inside a prepared insert, the lookup kept a
-- plan made while the table was small and read every queued message of the
-- account (a sequential scan; 2,005 rows for a backlog of 2,005). Without a
-- sequential scan, a bitmap or a sort, the index's order is the only way left.
CREATE FUNCTION messages_next_dispatch_rank(account text, max_rank int) RETURNS smallint
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
  SELECT least(coalesce((SELECT dispatch_rank FROM messages
                          WHERE account_id = account AND dispatch_rank IS NOT NULL
                          ORDER BY dispatch_rank DESC
                          LIMIT 1) + 1, 0), max_rank)::smallint
$$;
