// Facts learned from a Telnyx lookup, written as the Telnyx webhooks that would
// have told them, so reconciliation goes through the same store-once path, the
// same parser and the same guarded handlers as a webhook. Each id is
// deterministic (`reconcile:<resource>:<fact>`): asking twice stores one event,
// and the real webhook arriving late finds the transition already made.
// meta.handset_reconciled marks them for the history (Telnyx never sends it).

import type { ReconciledEvent, ReconciledFact } from '../carrier.js';
import { encodeClientState } from './events.js';

export function telnyxReconciled(fact: ReconciledFact): ReconciledEvent[] {
  switch (fact.kind) {
    case 'leg.answered': {
      const ccid = fact.leg.leg;
      return [event(`reconcile:${ccid}:answered`, 'call.answered', ccid, fact.answeredAt, legPayload(fact.leg))];
    }
    case 'leg.ended': {
      const ccid = fact.leg.leg;
      return [
        event(`reconcile:${ccid}:hangup`, 'call.hangup', ccid, fact.endedAt, {
          ...legPayload(fact.leg),
          // The lookup knows how long the leg was connected, not why it ended.
          call_duration: fact.connectedSeconds,
          end_time: fact.endedAt.toISOString(),
          hangup_cause: 'unspecified',
          hangup_source: 'unknown',
          start_time: fact.startedAt?.toISOString() ?? null,
        }),
      ];
    }
    case 'message.finalized':
      return [
        event(`reconcile:${fact.carrierMessageId}:finalized`, 'message.finalized', fact.carrierMessageId, fact.at, {
          completed_at: fact.at.toISOString(),
          errors: fact.errorCode ? [{ code: fact.errorCode }] : [],
          id: fact.carrierMessageId,
          to: [{ phone_number: fact.to, status: fact.carrierStatus }],
        }),
      ];
    case 'recording.saved':
      // The recording's own id, as its webhook carries it: the late webhook and this are one recording.
      return [
        event(`reconcile:${fact.recordingId}:saved`, 'call.recording.saved', fact.leg.leg, fact.endedAt, {
          ...legPayload(fact.leg),
          format: fact.format,
          recording_id: fact.recordingId,
          recording_started_at: fact.startedAt.toISOString(),
          recording_ended_at: fact.endedAt.toISOString(),
          recording_urls: fact.audioUrl && fact.format ? { [fact.format]: fact.audioUrl } : {},
        }),
      ];
    case 'recording.missing':
      return [
        event(`reconcile:${fact.leg.leg}:recording-missing`, 'call.recording.error', fact.leg.leg, fact.at, {
          ...legPayload(fact.leg),
          reason: 'the carrier lists no recording of the call',
        }),
      ];
  }
}

function legPayload(leg: Extract<ReconciledFact, { leg: unknown }>['leg']) {
  return {
    call_control_id: leg.leg,
    client_state: leg.echo === null ? null : encodeClientState(leg.echo),
    from: leg.from,
    to: leg.to,
  };
}

function event(id: string, eventType: string, subject: string, at: Date, payload: object): ReconciledEvent {
  const rawJson = JSON.stringify({
    data: { event_type: eventType, id, occurred_at: at.toISOString(), payload, record_type: 'event' },
    meta: { handset_reconciled: true },
  });
  return { eventId: id, eventType, subject, rawJson };
}
