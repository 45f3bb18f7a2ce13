// Asking the carrier about one resource now, rather than at the next scheduled
// pass: a hangup that says its leg was connected while no answer came, a caller
// found gone when we answered them, a recorded call that just ended (its
// recording is asked about until it is saved or the carrier says there is none).
// The lookup runs as a job (never an HTTP call inside someone's transaction) and
// what it learns is stored and applied like a webhook (reconcile.ts).

import type { Tx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys, type LookupTarget } from '../jobs/keys.js';

/**
 * Asks for a lookup of `target` (at `runAt`, else now), once however often it is
 * asked for before it runs.
 */
export function requestLookup(tx: Tx, target: LookupTarget, runAt?: Date): Promise<void> {
  return enqueue(
    tx,
    'reconcile.lookup',
    { target },
    { jobKey: jobKeys.lookup(target), jobKeyMode: 'preserve_run_at', ...(runAt ? { runAt } : {}) },
  );
}
