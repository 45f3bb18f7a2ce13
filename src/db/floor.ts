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

/** One relay process's floor, and when it must look from the head again. */
export class ClaimFloor<K extends string | number> {
  private key: K | null = null;
  private lookedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly keyAt: (at: Date) => K,
    private readonly everyMs = FLOOR_REFRESH_MS,
  ) {}

  /** Where to claim from, or null: it is time to look from the head (and call `looked`). */
  get(): K | null {
    return this.key !== null && Date.now() - this.lookedAt < this.everyMs ? this.key : null;
  }

  /** A look from the head taken at `now` found `oldest` pending, or nothing: the floor from here. */
  looked(oldest: K | null, now: Date): K {
    this.key = floorOf(oldest, now, this.keyAt);
    this.lookedAt = Date.now();
    return this.key;
  }

  /** Ms until the next look from the head is due. */
  untilLook(): number {
    return Math.max(0, this.lookedAt + this.everyMs - Date.now());
  }

  /** Look from the head at the next claim: something may be pending below the floor. */
  lower(): void {
    this.key = null;
  }
}
