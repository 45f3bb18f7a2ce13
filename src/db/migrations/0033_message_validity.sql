-- A message's validity period: when set, the message must leave for the carrier
-- before `expires_at` (send_at or its creation, plus the period); one still in
-- the dispatch line then fails as `expired`, once, with one event and no bill.
-- Owned by src/messages/messages.sql.ts.
ALTER TABLE messages ADD COLUMN expires_at timestamptz;
CREATE INDEX messages_line_expiry ON messages (expires_at)
  WHERE expires_at IS NOT NULL AND dispatch_rank IS NOT NULL AND dispatched_at IS NULL;
