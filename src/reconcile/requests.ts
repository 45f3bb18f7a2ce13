// Asking the carrier about one resource now, rather than at the next scheduled
// pass: a hangup that says its leg was connected while no answer came, a caller
// found gone when we answered them. The lookup runs as a job (never an HTTP call
// inside someone's transaction) and what it learns is stored and applied like a
// webhook (reconcile.ts).

import type { Tx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys, type LookupTarget } from '../jobs/keys.js';

/** Asks for a lookup of `target`, once however often it is asked for before it runs. */
export function requestLookup(tx: Tx, target: LookupTarget): Promise<void> {
  return enqueue(tx, 'reconcile.lookup', { target }, { jobKey: jobKeys.lookup(target), jobKeyMode: 'preserve_run_at' });
}
