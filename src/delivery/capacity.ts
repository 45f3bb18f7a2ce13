// This process's delivery slots, shared fairly: no account holds more than its
// share of attempts in flight at once, and no endpoint more than half of its
// account's share, so one customer's hanging endpoints leave the rest of the
// capacity to everyone else, and one hanging endpoint leaves its account's other
// endpoints room. An endpoint whose last attempt succeeded quickly may use all
// of its account's share but one slot: a fast endpoint gets more, and should it
// start hanging, its account's other endpoints still have a slot until its
// first slow or failed answer puts it back to half (and a failure, into its lane). (Delivery capacity is apart from carrier-event processing
// altogether: platform.ts gives it a job runner of its own.) The counts are per
// process, like the slots they guard.

export type Release = () => void;

/** An answer within this is fast: the endpoint earns the larger share. */
export const FAST_MS = 250;
/** Fast endpoints remembered at once (the least recently heard from is forgotten first, back to half). */
const MAX_FAST = 10_000;

export class Capacity {
  private readonly byAccount = new Map<string, number>();
  private readonly byEndpoint = new Map<string, number>();
  private readonly waiters = new Set<() => void>();
  /** Endpoints whose last attempt succeeded within FAST_MS. */
  private readonly fast = new Set<string>();
  readonly perEndpoint: number;
  readonly perFastEndpoint: number;

  constructor(readonly perAccount: number) {
    this.perEndpoint = Math.max(1, Math.floor(perAccount / 2));
    this.perFastEndpoint = Math.max(this.perEndpoint, perAccount - 1);
  }

  /** How an attempt to the endpoint went: what its share is next. */
  note(endpointId: string, durationMs: number, succeeded: boolean): void {
    this.fast.delete(endpointId);
    if (!succeeded || durationMs >= FAST_MS) return;
    if (this.fast.size >= MAX_FAST) this.fast.delete(this.fast.values().next().value!);
    this.fast.add(endpointId);
  }

  /** Attempts to the endpoint that may be in flight at once, as its answers have earned. */
  endpointShare(endpointId: string): number {
    return this.fast.has(endpointId) ? this.perFastEndpoint : this.perEndpoint;
  }

  /** Why a slot cannot be had now, or null when it can. */
  full(accountId: string, endpointId: string): 'account' | 'endpoint' | null {
    if ((this.byAccount.get(accountId) ?? 0) >= this.perAccount) return 'account';
    if ((this.byEndpoint.get(endpointId) ?? 0) >= this.endpointShare(endpointId)) return 'endpoint';
    return null;
  }

  /**
   * How much new work a claim may take (delivery/relay.ts): the room left to each
   * endpoint and each account with attempts in flight (any other has its whole share).
   */
  room(): { endpoints: string[]; endpointRooms: number[]; accounts: string[]; accountRooms: number[] } {
    const out = {
      endpoints: [] as string[],
      endpointRooms: [] as number[],
      accounts: [] as string[],
      accountRooms: [] as number[],
    };
    for (const [endpointId, used] of this.byEndpoint) {
      out.endpoints.push(endpointId);
      out.endpointRooms.push(Math.max(0, this.endpointShare(endpointId) - used));
    }
    for (const [accountId, used] of this.byAccount) {
      out.accounts.push(accountId);
      out.accountRooms.push(Math.max(0, this.perAccount - used));
    }
    return out;
  }

  /**
   * Of these attempts-to-be, in order, the ones the room left now admits, at
   * most `limit` (the rest would find no slot: the relay hands them back instead
   * of attempting them). Nothing is taken: each attempt still takes its slot.
   */
  admit<T extends { endpointId: string; accountId: string }>(items: readonly T[], limit: number): [T[], T[]] {
    const endpointRoom = new Map<string, number>();
    const accountRoom = new Map<string, number>();
    const admitted: T[] = [];
    const rest: T[] = [];
    for (const item of items) {
      const e =
        endpointRoom.get(item.endpointId) ??
        this.endpointShare(item.endpointId) - (this.byEndpoint.get(item.endpointId) ?? 0);
      const a = accountRoom.get(item.accountId) ?? this.perAccount - (this.byAccount.get(item.accountId) ?? 0);
      if (admitted.length < limit && e > 0 && a > 0) {
        admitted.push(item);
        endpointRoom.set(item.endpointId, e - 1);
        accountRoom.set(item.accountId, a - 1);
      } else {
        rest.push(item);
      }
    }
    return [admitted, rest];
  }

  /** A slot for one attempt to `endpointId` of `accountId`, or null when either has its share in flight. */
  take(accountId: string, endpointId: string): Release | null {
    if (this.full(accountId, endpointId)) return null;
    bump(this.byAccount, accountId, 1);
    bump(this.byEndpoint, endpointId, 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      bump(this.byAccount, accountId, -1);
      bump(this.byEndpoint, endpointId, -1);
      for (const wake of this.waiters) wake();
    };
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
}

function bump(counts: Map<string, number>, key: string, by: number) {
  const n = (counts.get(key) ?? 0) + by;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}
