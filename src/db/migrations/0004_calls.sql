-- Calls with a sequential ring plan, and their legs (one per ring target dialed).
-- Owned by src/calls.
CREATE TABLE calls (
  id                     text PRIMARY KEY DEFAULT handset_id('call'),
  account_id             text NOT NULL REFERENCES accounts (id),
  tenant_id              text,
  direction              text NOT NULL CHECK (direction IN ('outbound', 'inbound')),
  from_number            text NOT NULL, -- outbound: our number; inbound: the caller
  number                 text NOT NULL, -- the Handset number involved
  status                 text NOT NULL CHECK (status IN ('ringing', 'in_progress', 'completed', 'missed')),
  -- {"targets": [E.164…], "timeout": secs, "next": the next position to dial}; the
  -- cursor only moves by compare-and-swap.
  ring_plan              jsonb NOT NULL,
  carrier                text NOT NULL DEFAULT 'telnyx',
  -- inbound: the caller's leg at the carrier; a re-sent call.initiated finds it taken
  caller_leg_id          text,
  caller_call_control_id text,
  answered_leg_id        text,
  answered_at            timestamptz,
  ended_at               timestamptz,
  duration_seconds       integer,
  created_at             timestamptz NOT NULL DEFAULT now(),
  UNIQUE (carrier, caller_leg_id)
);
CREATE INDEX calls_account ON calls (account_id, id DESC);
CREATE INDEX calls_caller_control ON calls (caller_call_control_id) WHERE caller_call_control_id IS NOT NULL;

CREATE TABLE call_legs (
  id              text PRIMARY KEY DEFAULT handset_id('leg'),
  call_id         text NOT NULL REFERENCES calls (id),
  position        integer NOT NULL,
  to_number       text NOT NULL,
  status          text NOT NULL CHECK (status IN ('dialing', 'ringing', 'answered', 'completed', 'no_answer', 'canceled', 'failed')),
  call_control_id text UNIQUE,
  carrier_leg_id  text,
  hangup_cause    text,
  dialed_at       timestamptz,
  answered_at     timestamptz,
  ended_at        timestamptz,
  created_at      timestamptz NOT NULL DEFAULT now(),
  -- The ring cursor's compare-and-swap is what keeps a position from being dialed
  -- twice; this constraint is the backstop that would turn a bug into a retry.
  UNIQUE (call_id, position)
);
