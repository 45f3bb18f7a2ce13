// Asking the carrier about one resource now, rather than at the next scheduled
// pass: a hangup that says its leg was connected while no answer came, a caller
// found gone when we answered them. The lookup runs as a job (never an HTTP call
// inside someone's transaction) and what it learns is stored and applied like a
// webhook (reconcile.ts).

import type { Tx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';

export type LookupTarget =
  | { kind: 'leg'; legId: string }
  | { kind: 'caller'; callId: string }
  | { kind: 'message'; messageId: string };

declare global {
  namespace GraphileWorker {
    interface Tasks {
      /** One carrier lookup, asked for by a handler; `attempt` counts retries of an unreachable carrier. */
      'reconcile.lookup': { target: LookupTarget; attempt?: number };
      /** The scheduled pass over everything waiting past its bound; it schedules its next run itself. */
      reconcile: Record<string, never>;
    }
  }
}

export function lookupJobKey(t: LookupTarget): string {
  return `reconcile.lookup:${t.kind}:${t.kind === 'leg' ? t.legId : t.kind === 'caller' ? t.callId : t.messageId}`;
}

/** Asks for a lookup of `target`, once however often it is asked for before it runs. */
export function requestLookup(tx: Tx, target: LookupTarget): Promise<void> {
  return enqueue(tx, 'reconcile.lookup', { target }, { jobKey: lookupJobKey(target), jobKeyMode: 'preserve_run_at' });
}
