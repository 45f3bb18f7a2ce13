-- Prefixed, time-ordered ids ("msg_0193b0c2a1f4" + 16 hex of randomness): the
-- hex millisecond prefix makes ids sort by creation time, so cursor pagination
-- is an index range scan on the primary key.
CREATE FUNCTION handset_id(prefix text) RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT prefix || '_'
      || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
      || encode(substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8), 'hex')
$$;

-- The raw carrier webhook, stored once per (carrier, carrier event id): the
-- first layer of exactly-once. Owned by src/carrier/events.sql.ts.
CREATE TABLE carrier_events (
  id               text PRIMARY KEY DEFAULT handset_id('cev'),
  carrier          text NOT NULL DEFAULT 'telnyx',
  carrier_event_id text NOT NULL,
  event_type       text NOT NULL,
  payload          jsonb NOT NULL,
  processed_at     timestamptz,
  error            text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  UNIQUE (carrier, carrier_event_id)
);

-- One row per live graphile-worker pool, refreshed every few seconds; a pool
-- silent past the bound has its jobs unlocked. Owned by src/jobs/heartbeats.sql.ts.
CREATE TABLE worker_heartbeats (
  pool_id    text PRIMARY KEY,
  hostname   text NOT NULL,
  pid        integer NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  seen_at    timestamptz NOT NULL DEFAULT now()
);
