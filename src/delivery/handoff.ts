// Hand-off: the deliveries a worker's carrier-event batch fans out go to that
// worker's own delivery relay, leased to it in the batch's transaction, instead of
// being announced to every relay and claimed. After the commit the relay loads and
// attempts them at once: no NOTIFY and no claim per batch, and no wait for either.
// The lease is the relay's (the crash-recovery bound, renewed while an attempt
// runs), so a worker that dies between the commit and its attempts leaves them to
// any relay's claim once it runs out, as it does what it had claimed.
//
// The hand-off is bound to the transaction, not passed down: emit() is called from
// every handler, and only a batch that will hand its deliveries over opens one.

import type pg from 'pg';
import type { Tx } from '../db/tx.js';

/** A delivery leased to the relay it is handed to, with what its slot is counted against. */
export interface HandedDelivery {
  id: string;
  endpointId: string;
  accountId: string;
}

export class HandOff {
  /** The pending deliveries leased in the transaction (a savepoint rolled back may have undone some). */
  readonly deliveries: HandedDelivery[] = [];
  constructor(readonly leaseUntil: Date) {}
}

/** Takes the deliveries a committed transaction leased to it. */
export interface HandOffTaker {
  /** Until when a hand-off opened now leases its deliveries: the taker's clock, and the lease it renews. */
  leaseUntil(): Date;
  take(deliveries: readonly HandedDelivery[]): void;
}

const open = new WeakMap<pg.PoolClient, HandOff>();

/** Runs `fn` with `handOff` open on `tx`: what emit() fans out meanwhile is leased to it. */
export async function handingOff<T>(tx: Tx, handOff: HandOff, fn: () => Promise<T>): Promise<T> {
  open.set(tx, handOff);
  try {
    return await fn();
  } finally {
    open.delete(tx);
  }
}

/** The hand-off open on `tx`, if any. */
export function handOffOf(tx: Tx): HandOff | undefined {
  return open.get(tx);
}
