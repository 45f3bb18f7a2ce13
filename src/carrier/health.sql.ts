// SQL for carrier_health: each carrier's health as every worker process sees it.
// A carrier is `up` until `downAfter` requests in a row certainly failed to reach
// it (or were answered as not processed); then `down`, and no request is made to
// it until `retryAfter` has passed; then one request (the probe, claimed by one
// process with a guarded UPDATE and held for a lease) tries it: taken, it is up
// again; refused, down again. Every change is one guarded statement; a healthy
// carrier's successes write nothing.

import type { Db } from '../db/pool.js';

export const CARRIER_STATES = ['up', 'down', 'probing'] as const;
export type CarrierState = (typeof CARRIER_STATES)[number];

export interface CarrierHealthRow {
  carrier: string;
  state: CarrierState;
  /** Requests in a row the carrier certainly did not take. */
  refusals: number;
  changed_at: Date;
  /** While probing: until when the probe is the claiming process's. */
  probe_until: Date | null;
  last_refusal: string | null;
  /** It asked us to slow down: no request to it before this. */
  throttled_until: Date | null;
}
const HEALTH_COLUMNS = 'carrier, state, refusals, changed_at, probe_until, last_refusal, throttled_until';

/** The column list the row above is typed from, held to the table by a test. */
export const CARRIER_HEALTH_TABLE_COLUMNS = { carrier_health: HEALTH_COLUMNS };

export async function carrierHealthOf(db: Db, carrier: string): Promise<CarrierHealthRow | null> {
  const { rows } = await db.query<CarrierHealthRow>({
    name: 'carrier_health_of',
    text: `SELECT ${HEALTH_COLUMNS} FROM carrier_health WHERE carrier = $1`,
    values: [carrier],
  });
  return rows[0] ?? null;
}

export async function carrierHealthAll(db: Db): Promise<CarrierHealthRow[]> {
  const { rows } = await db.query<CarrierHealthRow>({
    name: 'carrier_health_all',
    text: `SELECT ${HEALTH_COLUMNS} FROM carrier_health ORDER BY carrier`,
  });
  return rows;
}

/**
 * Claims the probe of a carrier that has been down for `retryAfterMs` (or whose
 * last probe's lease ran out): the row back means this request is the probe.
 */
export async function carrierHealthClaimProbe(
  db: Db,
  carrier: string,
  now: Date,
  retryAfterMs: number,
  leaseMs: number,
): Promise<CarrierHealthRow | null> {
  const { rows } = await db.query<CarrierHealthRow>({
    name: 'carrier_health_claim_probe',
    text: `UPDATE carrier_health SET state = 'probing', probe_until = $2::timestamptz + make_interval(secs => $4::float8 / 1000)
            WHERE carrier = $1
              AND ((state = 'down' AND changed_at <= $2::timestamptz - make_interval(secs => $3::float8 / 1000))
                OR (state = 'probing' AND probe_until <= $2::timestamptz))
            RETURNING ${HEALTH_COLUMNS}`,
    values: [carrier, now, retryAfterMs, leaseMs],
  });
  return rows[0] ?? null;
}

/** The carrier took a request: up, its refusals forgotten. Writes only when there is something to forget. */
export async function carrierHealthUp(db: Db, carrier: string, now: Date): Promise<CarrierHealthRow | null> {
  const { rows } = await db.query<CarrierHealthRow>({
    name: 'carrier_health_up',
    text: `UPDATE carrier_health SET state = 'up', refusals = 0, probe_until = NULL,
                  changed_at = CASE WHEN state = 'up' THEN changed_at ELSE $2 END
            WHERE carrier = $1 AND (state <> 'up' OR refusals > 0)
            RETURNING ${HEALTH_COLUMNS}`,
    values: [carrier, now],
  });
  return rows[0] ?? null;
}

/**
 * The carrier certainly did not take a request: one more refusal in a row; down
 * once there are `downAfter` of them, or at once when the refused request was its
 * probe (the retry wait starts again).
 */
export async function carrierHealthRefused(
  db: Db,
  carrier: string,
  detail: string,
  now: Date,
  downAfter: number,
): Promise<CarrierHealthRow> {
  const { rows } = await db.query<CarrierHealthRow>({
    name: 'carrier_health_refused',
    text: `INSERT INTO carrier_health AS h (carrier, state, refusals, changed_at, last_refusal)
           VALUES ($1, CASE WHEN $4::int <= 1 THEN 'down' ELSE 'up' END, 1, $3, $2)
           ON CONFLICT (carrier) DO UPDATE SET
             refusals = h.refusals + 1,
             last_refusal = $2,
             state = CASE WHEN h.state = 'probing' OR h.refusals + 1 >= $4 THEN 'down' ELSE h.state END,
             probe_until = CASE WHEN h.state = 'probing' OR h.refusals + 1 >= $4 THEN NULL ELSE h.probe_until END,
             changed_at = CASE WHEN h.state = 'probing' OR (h.state = 'up' AND h.refusals + 1 >= $4) THEN $3
                               ELSE h.changed_at END
           RETURNING ${HEALTH_COLUMNS}`,
    values: [carrier, detail.slice(0, 500), now, downAfter],
  });
  return rows[0]!;
}

/** The carrier asked us to slow down: no request to it until `until` (the later of two asks holds). */
export async function carrierThrottle(db: Db, carrier: string, until: Date): Promise<void> {
  await db.query({
    name: 'carrier_throttle',
    text: `INSERT INTO carrier_health AS h (carrier, throttled_until) VALUES ($1, $2)
           ON CONFLICT (carrier) DO UPDATE SET throttled_until = greatest(h.throttled_until, $2)
            WHERE h.throttled_until IS NULL OR h.throttled_until < $2`,
    values: [carrier, until],
  });
}

/** The carriers that asked us to slow down and whose wait has not ended at `now`. */
export async function carriersThrottled(db: Db, now: Date): Promise<string[]> {
  const { rows } = await db.query<{ carrier: string }>({
    name: 'carriers_throttled',
    text: 'SELECT carrier FROM carrier_health WHERE throttled_until > $1',
    values: [now],
  });
  return rows.map((r) => r.carrier);
}
