-- Batched dispatch. The dispatcher (src/messages/dispatcher.ts) claims many
-- messages of the dispatch line in one statement, in the line's order, and hands
-- them to the carrier itself instead of one job per message. A claimed message
-- holds a lease (`dispatch_lease_until`) until its outcome is recorded or it is
-- handed to a job of its own (a retry): a dispatcher that dies mid-batch leaves
-- its messages leased, and once the lease has run out a sweep hands each to a
-- dispatch job, which asks the carrier again under the unknown-outcome rules.
-- Scheduled messages fall due into the same line, found by their time.
-- Owned by src/messages/messages.sql.ts.
ALTER TABLE messages ADD COLUMN dispatch_lease_until timestamptz;
CREATE INDEX messages_dispatch_lease ON messages (dispatch_lease_until)
  WHERE dispatch_lease_until IS NOT NULL;
CREATE INDEX messages_scheduled_due ON messages (send_at)
  WHERE status = 'scheduled';
