// Hand-off: the deliveries a worker's carrier-event batch fans out go to that
// worker's own delivery relay, leased to it in the batch's transaction, instead of
// being announced to every relay and claimed. The fan-out returns what each
// attempt needs, so after the commit the relay attempts them at once: no NOTIFY,
// no claim and no load per batch, and no wait for any of them. A delivery whose
// savepoint rolls back leaves the hand-off with it (onRollback), so nothing is
// attempted that the transaction did not keep. The lease is the relay's (the
// crash-recovery bound, renewed while an attempt runs), so a worker that dies
// between the commit and its attempts leaves them to any relay's claim once it
// runs out, as it does what it had claimed.
//
// The hand-off is bound to the transaction, not passed down: emit() is called from
// every handler, and only a batch that will hand its deliveries over opens one.

import type pg from 'pg';
import { onRollback, type Tx } from '../db/tx.js';
import type { DeliveryWork } from './deliveries.sql.js';

/** One transaction's hand-off to `taker`: the deliveries leased to it there, handed over once committed. */
export class HandOff {
  private readonly kept = new Set<DeliveryWork>();
  /** Until when the deliveries fanned out in the transaction are leased: the taker's clock, and the lease it renews. */
  readonly leaseUntil: Date;

  constructor(private readonly taker: HandOffTaker) {
    this.leaseUntil = taker.leaseUntil();
  }

  /** Hands a delivery over, with what its attempt needs, unless what `tx` wrote by now is rolled back. */
  add(tx: Tx, work: DeliveryWork): void {
    this.kept.add(work);
    onRollback(tx, () => this.kept.delete(work));
  }

  /** After the commit: the deliveries still in the transaction go to the taker, in the order they were made. */
  handOver(): void {
    if (this.kept.size > 0) this.taker.take([...this.kept]);
  }
}

/** Takes the deliveries a committed transaction leased to it. */
export interface HandOffTaker {
  /** Until when a hand-off opened now leases its deliveries: the taker's clock, and the lease it renews. */
  leaseUntil(): Date;
  take(deliveries: readonly DeliveryWork[]): void;
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
