// This process's delivery slots, shared fairly: no account holds more than its
// share of attempts in flight at once, so one customer's hanging endpoints leave
// the rest of the capacity to everyone else. (Delivery capacity is apart from
// carrier-event processing altogether: platform.ts gives it a job runner of its
// own.) The counts are per process, like the slots they guard.
//
// An endpoint's own limit follows how it answers: it starts at half its
// account's share, gains a slot for each quick 2xx up to all but one of the
// account's slots (so its account's other endpoints always have room), and
// falls to one slot at its first slow answer or failure, from which it climbs
// again. A fast receiver gets parallel deliveries; a slow or failing one holds
// one slot, whatever it is sent.

export type Release = () => void;

/** An answer slower than this (even a 2xx) takes an endpoint down to one slot. */
export const SLOW_ANSWER_MS = 1_000;

/** Endpoints whose limit is remembered; the least recently answered is forgotten first. */
const REMEMBERED_ENDPOINTS = 10_000;

export class Capacity {
  private readonly byAccount = new Map<string, number>();
  private readonly byEndpoint = new Map<string, number>();
  /** Each endpoint's limit, learnt from its answers; absent: the starting limit. */
  private readonly limits = new Map<string, number>();
  private readonly waiters = new Set<() => void>();
  /** Where an endpoint starts, and where one known to answer quickly may climb to. */
  readonly perEndpoint: number;
  readonly perEndpointMax: number;

  constructor(readonly perAccount: number) {
    this.perEndpoint = Math.max(1, Math.floor(perAccount / 2));
    this.perEndpointMax = Math.max(this.perEndpoint, perAccount - 1);
  }

  /** The attempts `endpointId` may have in flight now. */
  limit(endpointId: string): number {
    return this.limits.get(endpointId) ?? this.perEndpoint;
  }

  /** How an attempt went: a quick 2xx adds a slot (up to the maximum), anything else leaves one. */
  answered(endpointId: string, succeeded: boolean, durationMs: number): void {
    const before = this.limit(endpointId);
    const after = succeeded && durationMs < SLOW_ANSWER_MS ? Math.min(this.perEndpointMax, before + 1) : 1;
    this.limits.delete(endpointId); // re-inserted last: the map's order is the order of answers
    this.limits.set(endpointId, after);
    if (this.limits.size > REMEMBERED_ENDPOINTS) this.limits.delete(this.limits.keys().next().value!);
    if (after > before) for (const wake of this.waiters) wake();
  }

  /** Why a slot cannot be had now, or null when it can. */
  full(accountId: string, endpointId: string): 'account' | 'endpoint' | null {
    if ((this.byAccount.get(accountId) ?? 0) >= this.perAccount) return 'account';
    if ((this.byEndpoint.get(endpointId) ?? 0) >= this.limit(endpointId)) return 'endpoint';
    return null;
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
