-- Opt-outs (US messaging compliance): a recipient who texted STOP to one of an
-- account's numbers, or whom the carrier refused as opted out, or whom the
-- account entered through the API. A row is never deleted: opting back in
-- stamps deleted_at, so the list's history stays auditable (handset audit,
-- invariant 10). At most one active row per (account, number, recipient).
-- Owned by src/optouts.
CREATE TABLE opt_outs (
  id          text PRIMARY KEY DEFAULT handset_id('opt'),
  account_id  text NOT NULL REFERENCES accounts (id),
  tenant_id   text,
  number      text NOT NULL,
  recipient   text NOT NULL,
  source      text NOT NULL CHECK (source IN ('keyword', 'carrier', 'api')),
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  deleted_at  timestamptz,
  sequence    integer NOT NULL DEFAULT 1,
  CHECK (deleted_at IS NULL OR deleted_at >= created_at)
);
CREATE UNIQUE INDEX opt_outs_active ON opt_outs (account_id, number, recipient) WHERE deleted_at IS NULL;
CREATE INDEX opt_outs_account ON opt_outs (account_id, id DESC);

-- When the dispatcher decided to hand the message to the carrier, after it
-- checked the opt-out list under the pair's lock; and the parts the carrier said
-- it split the text into, when that differs from our estimate in `segments`.
ALTER TABLE messages ADD COLUMN dispatched_at timestamptz;
ALTER TABLE messages ADD COLUMN carrier_segments integer CHECK (carrier_segments > 0);
