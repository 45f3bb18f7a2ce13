// Where the relays' claims start in a partial index of pending rows. A row that
// stops being pending (processed, delivered) leaves a dead entry at the head of
// such an index until VACUUM removes it, and autovacuum comes once a fifth of a
// large table has changed: a claim from the head walks every one of those entries
// (hundreds of pages for one row after a busy minute). So a relay claims from a
// floor below which nothing it may take was pending when it last looked, and looks
// again from the head at least once a FLOOR_REFRESH_MS. A row that turns up below
// the floor meanwhile (stored with an older key by a slow commit, or by a host
// whose clock is behind) waits at most that long; the floor stays FLOOR_MARGIN_MS
// below the clock so that this is rare.

/** How far below the clock a floor stays at least: a commit's delay and the skew between hosts' clocks. */
export const FLOOR_MARGIN_MS = 2_000;

/** How often at least a relay looks from the head of its index again, and sets its floor. */
export const FLOOR_REFRESH_MS = 1_000;

/** The floor for a look taken at `now` that found `oldest` (its oldest pending key), or nothing pending. */
export function floorOf<K extends string | number>(oldest: K | null, now: Date, keyAt: (at: Date) => K): K {
  const margin = keyAt(new Date(now.getTime() - FLOOR_MARGIN_MS));
  return oldest !== null && oldest < margin ? oldest : margin;
}
