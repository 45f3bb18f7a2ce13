// This process's delivery slots, shared so that no set of accounts can hold all
// of them. An account has at most its share in flight, and an endpoint at most
// half of its account's share (all of it but one slot while its last answer was
// a fast success), so one hanging endpoint leaves its account's other endpoints
// room. Across accounts, the pool is split in two:
//
// - the general pool, the size of one account's share: an attempt that may hang
//   (to an endpoint not known to answer fast) beyond its account's first slot
//   takes a slot from it, and each account in it has at most its fair part (the
//   pool divided among the accounts using it), so several noisy accounts share
//   what one could have had;
// - the rest of the pool: an account with nothing in flight takes its first slot
//   wherever one is free, and an endpoint that answers fast takes any free slot.
//
// So accounts whose endpoints hang hold at most the general pool and one slot
// each: an account with nothing in flight, or whose endpoint answers fast, finds
// a slot while fewer accounts hang at once than there are slots beyond the
// general pool (16 of the default 32). Endpoints known to fail run in their
// lanes, on the delivery runner's few job slots, whatever their number. (Delivery capacity is apart from carrier-event
// processing altogether: platform.ts gives it a job runner of its own.) The
// counts are per process, like the slots they guard.

import type { ClaimRoom } from './deliveries.sql.js';

export type Release = () => void;

/** An answer within this is fast: the endpoint earns the larger share, and slots outside the general pool. */
export const FAST_MS = 250;
/** Fast endpoints (and accounts) remembered at once (the least recently heard from is forgotten first). */
const MAX_FAST = 10_000;

type Full = 'account' | 'endpoint';

/** The counts a decision reads: the live ones, or admit()'s plan on top of them. */
interface Counts {
  account(id: string): number;
  endpoint(id: string): number;
  /** The account's attempts in flight in the general pool. */
  general(id: string): number;
  held: number;
  generalHeld: number;
  /** Accounts with attempts in the general pool. */
  generalAccounts: number;
}

export class Capacity {
  private readonly byAccount = new Map<string, number>();
  private readonly byEndpoint = new Map<string, number>();
  private readonly generalByAccount = new Map<string, number>();
  private held = 0;
  private generalHeld = 0;
  /** Woken by every released slot: acquire()'s waiters, and whoever asked (onRelease). */
  private readonly waiters = new Set<() => void>();
  /** Endpoints whose last attempt succeeded within FAST_MS. */
  private readonly fast = new Set<string>();
  /** Accounts whose last answered attempt succeeded within FAST_MS (a relay claim's guess at their room). */
  private readonly fastAccounts = new Set<string>();
  readonly perEndpoint: number;
  readonly perFastEndpoint: number;
  /** Slots for attempts that may hang beyond their account's first: one account's share (unbounded without a size). */
  readonly generalPool: number;

  /** `size`: the slots of this process (HANDSET_DELIVERY_CONCURRENCY); without it, only the shares bound. */
  constructor(
    readonly perAccount: number,
    readonly size = Number.POSITIVE_INFINITY,
  ) {
    this.perEndpoint = Math.max(1, Math.floor(perAccount / 2));
    this.perFastEndpoint = Math.max(this.perEndpoint, perAccount - 1);
    this.generalPool = Number.isFinite(size) ? Math.min(perAccount, size) : Number.POSITIVE_INFINITY;
  }

  /** How an attempt to the endpoint (of the account) went: what its share is next. */
  note(endpointId: string, durationMs: number, succeeded: boolean, accountId?: string): void {
    const fast = succeeded && durationMs < FAST_MS;
    remember(this.fast, endpointId, fast);
    if (accountId !== undefined) remember(this.fastAccounts, accountId, fast);
  }

  /** Attempts to the endpoint that may be in flight at once, as its answers have earned. */
  endpointShare(endpointId: string): number {
    return this.fast.has(endpointId) ? this.perFastEndpoint : this.perEndpoint;
  }

  /** Free slots in this process. */
  free(): number {
    return Math.max(0, this.size - this.held);
  }

  /** Why a slot cannot be had now, or null when it can. */
  full(accountId: string, endpointId: string): Full | null {
    return this.decide(this.live(), accountId, endpointId).full;
  }

  /**
   * How much new work a claim may take (delivery/relay.ts): the room left to each
   * endpoint and each account with attempts in flight, and to any other endpoint
   * and account. An account's room is a guess for the claim (take() decides): an
   * account known fast may use any free slot, another one only the general pool.
   */
  room(): Omit<ClaimRoom, 'limit'> {
    const out = {
      endpoints: [] as string[],
      endpointRooms: [] as number[],
      accounts: [] as string[],
      accountRooms: [] as number[],
      perEndpoint: this.perEndpoint,
      // An account with nothing in flight: its first slot anywhere, then its fair part of the general pool.
      perAccount: Math.min(this.perAccount, this.free(), 1 + this.generalRoom(null)),
    };
    for (const [endpointId, used] of this.byEndpoint) {
      out.endpoints.push(endpointId);
      out.endpointRooms.push(Math.max(0, this.endpointShare(endpointId) - used));
    }
    for (const [accountId, used] of this.byAccount) {
      const room = Math.min(this.perAccount - used, this.free());
      out.accounts.push(accountId);
      out.accountRooms.push(
        Math.max(0, this.fastAccounts.has(accountId) ? room : Math.min(room, this.generalRoom(accountId))),
      );
    }
    return out;
  }

  /**
   * Of these attempts-to-be, in order, the ones the room left now admits, at
   * most `limit` (the rest would find no slot: the relay hands them back instead
   * of attempting them). Nothing is taken: each attempt still takes its slot.
   */
  admit<T extends { endpointId: string; accountId: string }>(items: readonly T[], limit: number): [T[], T[]] {
    const plan = {
      byAccount: new Map<string, number>(),
      byEndpoint: new Map<string, number>(),
      general: new Map<string, number>(),
    };
    const live = this.live();
    const counts: Counts = {
      account: (id) => live.account(id) + (plan.byAccount.get(id) ?? 0),
      endpoint: (id) => live.endpoint(id) + (plan.byEndpoint.get(id) ?? 0),
      general: (id) => live.general(id) + (plan.general.get(id) ?? 0),
      held: live.held,
      generalHeld: live.generalHeld,
      generalAccounts: live.generalAccounts,
    };
    const admitted: T[] = [];
    const rest: T[] = [];
    for (const item of items) {
      const d = this.decide(counts, item.accountId, item.endpointId);
      if (admitted.length >= limit || d.full) {
        rest.push(item);
        continue;
      }
      admitted.push(item);
      bump(plan.byAccount, item.accountId, 1);
      bump(plan.byEndpoint, item.endpointId, 1);
      counts.held++;
      if (d.general) {
        if (counts.general(item.accountId) === 0) counts.generalAccounts++;
        bump(plan.general, item.accountId, 1);
        counts.generalHeld++;
      }
    }
    return [admitted, rest];
  }

  /** A slot for one attempt to `endpointId` of `accountId`, or null when there is none for it now (full()). */
  take(accountId: string, endpointId: string): Release | null {
    const d = this.decide(this.live(), accountId, endpointId);
    if (d.full) return null;
    bump(this.byAccount, accountId, 1);
    bump(this.byEndpoint, endpointId, 1);
    this.held++;
    if (d.general) {
      bump(this.generalByAccount, accountId, 1);
      this.generalHeld++;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      bump(this.byAccount, accountId, -1);
      bump(this.byEndpoint, endpointId, -1);
      this.held--;
      if (d.general) {
        bump(this.generalByAccount, accountId, -1);
        this.generalHeld--;
      }
      for (const wake of this.waiters) wake();
    };
  }

  /** Calls `listener` whenever a slot is released (a relay then claims what waited for room); returns the unsubscribe. */
  onRelease(listener: () => void): () => void {
    const wake = () => listener();
    this.waiters.add(wake);
    return () => this.waiters.delete(wake);
  }

  /** Waits for a slot until `deadline` (a released slot wakes the waiters); null if none came. */
  async acquire(accountId: string, endpointId: string, deadline: number): Promise<Release | null> {
    for (;;) {
      const slot = this.take(accountId, endpointId);
      if (slot) return slot;
      const left = deadline - Date.now();
      if (left <= 0) return null;
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.waiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, left);
        this.waiters.add(wake);
      });
    }
  }

  private live(): Counts {
    return {
      account: (id) => this.byAccount.get(id) ?? 0,
      endpoint: (id) => this.byEndpoint.get(id) ?? 0,
      general: (id) => this.generalByAccount.get(id) ?? 0,
      held: this.held,
      generalHeld: this.generalHeld,
      generalAccounts: this.generalByAccount.size,
    };
  }

  /** Slots of the general pool the account (null: one with none there) may still take: the pool's room, its fair part's. */
  private generalRoom(accountId: string | null): number {
    const mine = accountId === null ? 0 : (this.generalByAccount.get(accountId) ?? 0);
    const accounts = this.generalByAccount.size + (mine > 0 ? 0 : 1);
    const fairPart = Math.max(1, Math.floor(this.generalPool / accounts));
    return Math.max(0, Math.min(this.generalPool - this.generalHeld, fairPart - mine));
  }

  /**
   * Whether an attempt to `endpointId` of `accountId` may take a slot given `c`,
   * and whether that slot is the general pool's. The account's share and the
   * process's slots first (a full account waits in its lane), then the
   * endpoint's share; then, for an attempt that may hang beyond the account's
   * first, the general pool and the account's fair part of it.
   */
  private decide(c: Counts, accountId: string, endpointId: string): { full: Full | null; general: boolean } {
    const used = c.account(accountId);
    if (used >= this.perAccount || c.held >= this.size) return { full: 'account', general: false };
    if (c.endpoint(endpointId) >= this.endpointShare(endpointId)) return { full: 'endpoint', general: false };
    if (used === 0 || this.fast.has(endpointId)) return { full: null, general: false };
    const mine = c.general(accountId);
    const fairPart = Math.max(1, Math.floor(this.generalPool / (c.generalAccounts + (mine > 0 ? 0 : 1))));
    if (c.generalHeld >= this.generalPool || mine >= fairPart) return { full: 'account', general: true };
    return { full: null, general: true };
  }
}

function bump(counts: Map<string, number>, key: string, by: number) {
  const n = (counts.get(key) ?? 0) + by;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}

/** Keeps `key` in (fast) or out of the set, the least recently heard from forgotten first past MAX_FAST. */
function remember(set: Set<string>, key: string, fast: boolean) {
  set.delete(key);
  if (!fast) return;
  if (set.size >= MAX_FAST) set.delete(set.values().next().value!);
  set.add(key);
}
