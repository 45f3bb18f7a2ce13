// Builders for tests: a few facts in, the exact envelope body the simulated
// carrier would send out, so tests can craft, replay, re-send under a new id and
// reorder webhooks themselves.

import { randomUUID } from 'node:crypto';
import { envelopeBody, type TelnyxEvent } from './events.js';
import { deliveryError, messageEvents, type FinalStatus, type MessageRecord } from './messaging-events.js';
import { priceOf, segmentsOf } from './segments.js';
import {
  callEvents,
  SIP_HANGUP_CAUSE,
  type Hangup,
  type HangupSource,
  type LegFacts,
  type RecordingFacts,
} from './voice-events.js';

export interface EnvelopeOptions {
  /** data.id; a fresh UUID by default. */
  eventId?: string;
  /** data.occurred_at; now by default. */
  occurredAt?: Date | number;
  attempt?: number;
  deliveredTo?: string;
}

export interface MessageInput {
  messageId?: string;
  from: string;
  to: string;
  text?: string;
  mediaUrls?: string[];
  webhookUrl?: string | null;
  messagingProfileId?: string;
  organizationId?: string;
}

export interface LegInput {
  callControlId: string;
  callLegId?: string;
  callSessionId?: string;
  connectionId?: string;
  from: string;
  to: string;
  clientState?: string | null;
  startTime?: Date | number;
  direction?: 'incoming' | 'outgoing';
}

export interface RecordingInput {
  /** The unique key of a recording; a fresh UUID by default. */
  recordingId?: string;
  format?: 'wav' | 'mp3';
  channels?: 'single' | 'dual';
  /** Default: 5 s before recordingEndedAt. */
  recordingStartedAt?: Date | number;
  /** Default: 1 s before occurredAt. */
  recordingEndedAt?: Date | number;
  /** recording_urls and public_recording_urls[format]; an example S3-style URL by default. */
  url?: string;
}

const DEFAULT_DELIVERED_TO = 'https://example.com/webhooks';

function ms(value: Date | number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  return value instanceof Date ? value.getTime() : value;
}

function messageFromInput(i: MessageInput, direction: 'outbound' | 'inbound', at: number): MessageRecord {
  const mediaUrls = i.mediaUrls ?? [];
  const isMms = mediaUrls.length > 0;
  const text = i.text ?? '';
  const { encoding, parts } = segmentsOf(text, isMms);
  return {
    id: i.messageId ?? randomUUID(),
    direction,
    type: isMms ? 'MMS' : 'SMS',
    from: i.from,
    to: i.to,
    text,
    subject: null,
    mediaUrls,
    messagingProfileId: i.messagingProfileId ?? randomUUID(),
    organizationId: i.organizationId ?? randomUUID(),
    encoding,
    parts,
    price: priceOf(parts, isMms),
    tags: [],
    webhookUrl: i.webhookUrl === undefined ? DEFAULT_DELIVERED_TO : i.webhookUrl,
    webhookFailoverUrl: null,
    receivedAt: at - 1100,
    sentAt: at - 1000,
    completedAt: null,
    validUntil: at - 1100 + 3_600_000,
    status: 'queued',
    errors: [],
    tcrCampaignId: 'CNZO3VL',
  };
}

function legFromInput(i: LegInput, at: number): LegFacts {
  return {
    callControlId: i.callControlId,
    callLegId: i.callLegId ?? randomUUID(),
    callSessionId: i.callSessionId ?? randomUUID(),
    connectionId: i.connectionId ?? '1684641123236054244',
    direction: i.direction ?? 'outgoing',
    from: i.from,
    to: i.to,
    clientState: i.clientState ?? null,
    tags: [],
    startTime: ms(i.startTime, at),
  };
}

function render(event: TelnyxEvent, o: EnvelopeOptions): string {
  return envelopeBody(event, o.attempt ?? 1, o.deliveredTo ?? DEFAULT_DELIVERED_TO);
}

export const telnyxWebhook = {
  messageReceived(i: MessageInput & EnvelopeOptions): string {
    const at = ms(i.occurredAt, Date.now());
    const m = { ...messageFromInput(i, 'inbound', at), receivedAt: at, sentAt: null, validUntil: null };
    return render(messageEvents.messageReceived(m, at, i.eventId), i);
  },

  messageSent(i: MessageInput & EnvelopeOptions): string {
    const at = ms(i.occurredAt, Date.now());
    const m = { ...messageFromInput(i, 'outbound', at), receivedAt: at - 50, sentAt: at };
    return render(messageEvents.messageSent(m, at, i.eventId), i);
  },

  messageFinalized(i: MessageInput & EnvelopeOptions & { status: FinalStatus; errorCode?: string }): string {
    const at = ms(i.occurredAt, Date.now());
    const m = messageFromInput(i, 'outbound', at);
    const failed = i.status === 'delivery_failed' || i.status === 'sending_failed' || i.status === 'expired';
    const errors = i.errorCode ? [deliveryError(i.errorCode)] : failed ? [deliveryError('40008')] : [];
    return render(messageEvents.messageFinalized(m, { status: i.status, errors }, at, i.eventId), i);
  },

  callInitiated(i: LegInput & EnvelopeOptions): string {
    const at = ms(i.occurredAt, Date.now());
    return render(callEvents.callInitiated(legFromInput(i, at), at, i.eventId), i);
  },

  callAnswered(i: LegInput & EnvelopeOptions): string {
    const at = ms(i.occurredAt, Date.now());
    return render(callEvents.callAnswered(legFromInput(i, at), at, i.eventId), i);
  },

  callHangup(
    i: LegInput &
      EnvelopeOptions & {
        hangupCause: string;
        hangupSource?: HangupSource;
        sipHangupCause?: string;
        /** When the leg was answered; omit for a leg that never answered. */
        answeredAt?: Date | number;
      },
  ): string {
    const at = ms(i.occurredAt, Date.now());
    const hangup: Hangup = {
      cause: i.hangupCause,
      source: i.hangupSource ?? 'callee',
      sipCause: i.sipHangupCause ?? SIP_HANGUP_CAUSE[i.hangupCause] ?? 'unspecified',
      answeredAt: i.answeredAt === undefined ? null : ms(i.answeredAt, at),
    };
    return render(callEvents.callHangup(legFromInput(i, at), hangup, at, i.eventId), i);
  },

  callBridged(i: LegInput & EnvelopeOptions): string {
    const at = ms(i.occurredAt, Date.now());
    return render(callEvents.callBridged(legFromInput(i, at), at, i.eventId), i);
  },

  /** call.recording.saved; the client_state is the record_start's (LegInput.clientState). */
  callRecordingSaved(i: LegInput & EnvelopeOptions & RecordingInput): string {
    const at = ms(i.occurredAt, Date.now());
    const endedAt = ms(i.recordingEndedAt, at - 1000);
    const format = i.format ?? 'wav';
    const recordingId = i.recordingId ?? randomUUID();
    const facts: RecordingFacts = {
      recordingId,
      clientState: i.clientState ?? null,
      format,
      channels: i.channels ?? 'single',
      startedAt: ms(i.recordingStartedAt, endedAt - 5000),
      endedAt,
      url:
        i.url ??
        `https://s3.amazonaws.com/telephony-recorder-prod/${recordingId}.${format}?X-Amz-Expires=600&X-Amz-Signature=example`,
    };
    return render(callEvents.callRecordingSaved(legFromInput(i, at), facts, at, i.eventId), i);
  },

  /** call.recording.error, with Telnyx's reason text unless another is given. */
  callRecordingError(i: LegInput & EnvelopeOptions & { reason?: string }): string {
    const at = ms(i.occurredAt, Date.now());
    const leg = legFromInput(i, at);
    const reason = i.reason ?? 'Internal server error';
    return render(callEvents.callRecordingError(leg, leg.clientState, reason, at, i.eventId), i);
  },
};
