// Per-carrier health: a circuit breaker kept in PostgreSQL (health.sql.ts), so
// every worker process sees one state and one probe is made at a time. Before a
// send the dispatcher asks the gate: open (send; perhaps as the probe), or shut
// until a moment (the carrier is marked down: no request is made to it). After
// it, the answer is noted: taken → up; certainly not taken (never reached, or
// refused as not processed) → one more refusal. An unknown outcome (a timeout, a
// 5xx) says nothing about the carrier's health here, and a probe that got one
// keeps its lease until it runs out. A "slow down" (429) is neither: the carrier
// is left alone for the wait it asked for (throttled), and nothing is failed.

import type { Db } from '../db/pool.js';
import type { CommandResult } from './carrier.js';
import {
  carrierHealthClaimProbe,
  carrierHealthOf,
  carrierHealthRefused,
  carrierHealthUp,
  carrierThrottle,
} from './health.sql.js';

/** How long a carrier that said "slow down" without saying for how long is left alone. */
export const DEFAULT_THROTTLE_MS = 1_000;

export interface HealthSettings {
  /** Refusals in a row that mark a carrier down. */
  downAfter: number;
  /** How long a carrier marked down is left alone before one request probes it. */
  retryAfterMs: number;
}

/** HANDSET_CARRIER_DOWN_AFTER and HANDSET_CARRIER_RETRY_AFTER's defaults. */
export const DEFAULT_HEALTH: HealthSettings = { downAfter: 3, retryAfterMs: 10_000 };

export type Gate =
  | { open: true; probe: boolean }
  /** `throttled`: it asked us to slow down (nothing to fail over for); otherwise it is marked down. */
  | { open: false; until: Date; why: string; throttled: boolean };

/** Whether a request may be made to `carrier` now. */
export async function carrierGate(db: Db, carrier: string, now: Date, s: HealthSettings): Promise<Gate> {
  const h = await carrierHealthOf(db, carrier);
  if (h?.throttled_until && h.throttled_until > now) {
    return { open: false, until: h.throttled_until, why: `${carrier} asked us to slow down`, throttled: true };
  }
  if (!h || h.state === 'up') return { open: true, probe: false };
  const why = `${carrier} is marked down after ${h.refusals} refused request(s)${h.last_refusal ? ` (${h.last_refusal})` : ''}`;
  const due = h.state === 'down' ? h.changed_at.getTime() + s.retryAfterMs : (h.probe_until?.getTime() ?? 0);
  if (due <= now.getTime()) {
    // The probe's lease: as long as the wait, so a probe that hangs is tried again no sooner.
    const claimed = await carrierHealthClaimProbe(db, carrier, now, s.retryAfterMs, s.retryAfterMs);
    if (claimed) return { open: true, probe: true };
  }
  return { open: false, until: new Date(Math.max(due, now.getTime() + 200)), why, throttled: false };
}

/** What a request's answer says of its carrier's health. */
export async function noteAnswer(
  db: Db,
  carrier: string,
  result: CommandResult<unknown>,
  now: Date,
  s: HealthSettings,
): Promise<void> {
  if (result.ok || result.kind === 'rejected') await carrierHealthUp(db, carrier, now);
  else if (result.throttled) {
    // Not a refusal: it is up, and busy. No request to it until the wait it asked for ends.
    await carrierThrottle(db, carrier, new Date(now.getTime() + (result.retryAfterMs ?? DEFAULT_THROTTLE_MS)));
  } else if (result.notAccepted) await carrierHealthRefused(db, carrier, result.detail, now, s.downAfter);
}
