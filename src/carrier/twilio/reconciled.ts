// Facts learned from a Twilio lookup, written as the status callback that would
// have told them, so they go through the same store-once path, parser and guards
// as a webhook. The id (`reconcile:<MessageSid>:<status>`) is deterministic but
// not the callback's own: a callback stored earlier and given up on (it came
// before the message was ours to find) does not hide what the lookup learned,
// and either applied second finds nothing left to do.

import type { ReconciledEvent, ReconciledFact } from '../carrier.js';
import { STATUS_EVENT } from './events.js';

export function twilioReconciled(fact: ReconciledFact): ReconciledEvent[] {
  if (fact.kind !== 'message.finalized') throw new Error('Twilio carries no calls in Handset');
  const id = `reconcile:${fact.carrierMessageId}:${fact.carrierStatus}`;
  const params: Record<string, string> = {
    MessageSid: fact.carrierMessageId,
    MessageStatus: fact.carrierStatus,
    To: fact.to,
    ...(fact.errorCode ? { ErrorCode: fact.errorCode } : {}),
  };
  const rawJson = JSON.stringify({ params, query: {}, received_at: fact.at.toISOString(), handset_reconciled: true });
  return [{ eventId: id, eventType: STATUS_EVENT, subject: fact.carrierMessageId, rawJson }];
}
