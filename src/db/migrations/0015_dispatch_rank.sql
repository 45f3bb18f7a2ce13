-- Fair dispatch between accounts. A queued outbound message carries its place in
-- its account's backlog: 0 for the first while the account has nothing queued,
-- then one more than the account's last queued message. Its dispatch job runs at
-- that priority, so the job runner takes every account's first message before
-- anyone's second: a campaign of thousands does not hold up another account's one
-- message (or call), and an account's own messages keep their order. The rank is
-- cleared when the message leaves `queued`, so the index holds only backlogs and a
-- guard on status never matches its predicate. graphile-worker keeps priority in a
-- smallint, and so does this. Owned by src/messages/messages.sql.ts.
ALTER TABLE messages ADD COLUMN dispatch_rank smallint CHECK (dispatch_rank >= 0);
CREATE INDEX messages_dispatch_backlog ON messages (account_id, dispatch_rank DESC) WHERE dispatch_rank IS NOT NULL;
