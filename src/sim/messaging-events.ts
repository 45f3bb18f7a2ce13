// The messaging webhooks of the simulated carrier (message.received, message.sent,
// message.finalized) and the POST /v2/messages answer, from the simulator's own
// message records, each payload with exactly the keys of captured Telnyx
// webhooks (the fixtures in test/fixtures/telnyx).

import { randomUUID } from 'node:crypto';
import { messagingTime, type TelnyxEvent } from './events.js';
import type { Encoding, Price } from './segments.js';

export type MessageStatus =
  | 'queued'
  | 'sent'
  | 'delivered'
  | 'delivery_failed'
  | 'sending_failed'
  | 'expired'
  | 'delivery_unconfirmed'
  | 'webhook_delivered';

export type FinalStatus = 'delivered' | 'delivery_failed' | 'sending_failed' | 'expired' | 'delivery_unconfirmed';

export interface MessageError {
  code: string;
  title: string;
  detail: string;
  source: { pointer: string };
}

/** Delivery error codes as Telnyx's error-code list names them. */
const DELIVERY_ERRORS: Record<string, [title: string, detail: string]> = {
  '40001': ['Not routable', 'The destination is not routable.'],
  '40002': ['Blocked as spam - temporary', 'The message was temporarily blocked as spam.'],
  '40003': ['Blocked as spam - permanent', 'The message was permanently blocked as spam.'],
  '40004': ['Rejected by destination', 'The destination carrier rejected the message.'],
  '40005': ['Message expired', 'The message expired before it could be delivered.'],
  '40006': ['Recipient unavailable', 'The recipient is temporarily unavailable.'],
  '40008': ['Undeliverable', 'The carrier did not accept the message.'],
  '40009': ['Invalid message body', 'The message body was rejected.'],
  '40010': ['Not 10DLC registered', 'The sending number is not registered for 10DLC.'],
  '40011': ['Rate limit exceeded', 'The upstream carrier rate limit was exceeded.'],
  '40012': ['Invalid destination number', 'The destination number is invalid.'],
  '40013': ['Invalid source number', 'The source number is invalid.'],
  '40014': ['Expired in queue', 'The message was not sent before its validity period ended.'],
  '40015': ['Internal spam filter', 'The message was blocked by the spam filter.'],
};

export function deliveryError(code: string): MessageError {
  const [title, detail] = DELIVERY_ERRORS[code] ?? ['Delivery failed', `The message could not be delivered (${code}).`];
  return { code, title, detail, source: { pointer: '/to/0/phone_number' } };
}

export interface MessageRecord {
  id: string;
  direction: 'outbound' | 'inbound';
  type: 'SMS' | 'MMS';
  from: string;
  to: string;
  text: string;
  subject: string | null;
  mediaUrls: string[];
  messagingProfileId: string;
  organizationId: string;
  encoding: Encoding;
  parts: number;
  price: Price;
  tags: string[];
  /** The primary URL its webhooks go to (per-message, else the profile's), as the payload reports it. */
  webhookUrl: string | null;
  webhookFailoverUrl: string | null;
  /** Simulated epoch ms. */
  receivedAt: number;
  sentAt: number | null;
  completedAt: number | null;
  validUntil: number | null;
  /** to[0].status as it stands. */
  status: MessageStatus;
  errors: MessageError[];
  tcrCampaignId: string;
}

const SENDER_CARRIER = { carrier: 'Telnyx', line_type: 'Wireless' };
const RECIPIENT_CARRIER = { carrier: 'T-MOBILE USA, INC.', line_type: 'Wireless' };
const INBOUND_SENDER_CARRIER = { carrier: 'T-Mobile USA', line_type: 'long_code' };

const IMAGE_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
};

function media(m: MessageRecord, inbound: boolean) {
  return m.mediaUrls.map((url) => {
    const ext = /\.([a-z0-9]+)(?:$|[?#])/i.exec(url)?.[1]?.toLowerCase();
    return { url, content_type: inbound && ext ? (IMAGE_TYPES[ext] ?? null) : null, sha256: null, size: null };
  });
}

const t = (ms: number | null) => (ms === null ? null : messagingTime(ms));

export const messageEvents = {
  /** M1: an inbound SMS/MMS. */
  messageReceived(m: MessageRecord, at: number, id: string = randomUUID()): TelnyxEvent {
    return {
      id,
      eventType: 'message.received',
      occurredAt: messagingTime(at),
      payload: {
        completed_at: null,
        cost: { amount: '0.0000', currency: 'USD' },
        direction: 'inbound',
        encoding: m.encoding,
        errors: [],
        from: { ...INBOUND_SENDER_CARRIER, phone_number: m.from },
        id: m.id,
        media: media(m, true),
        messaging_profile_id: m.messagingProfileId,
        organization_id: m.organizationId,
        parts: m.parts,
        received_at: messagingTime(m.receivedAt),
        record_type: 'message',
        sent_at: null,
        tags: m.tags,
        text: m.text,
        to: [{ carrier: 'Telnyx', line_type: 'Wireless', phone_number: m.to, status: 'webhook_delivered' }],
        type: m.type,
        valid_until: null,
        webhook_failover_url: m.webhookFailoverUrl,
        webhook_url: m.webhookUrl,
      },
    };
  },

  /** M2: accepted by the upstream carrier. */
  messageSent(m: MessageRecord, at: number, id: string = randomUUID()): TelnyxEvent {
    return {
      id,
      eventType: 'message.sent',
      occurredAt: messagingTime(at),
      payload: {
        ...outboundCommon(m),
        completed_at: null,
        errors: [],
        from: { ...SENDER_CARRIER, phone_number: m.from },
        sent_at: t(m.sentAt),
        to: [{ ...RECIPIENT_CARRIER, phone_number: m.to, status: 'sent' }],
      },
    };
  },

  /**
   * M3 (delivered) or M4 (every other final status): the two reference shapes
   * differ (M3 adds cost_breakdown, tcr_* and from.status), and each is kept.
   */
  messageFinalized(
    m: MessageRecord,
    final: { status: FinalStatus; errors: MessageError[] },
    at: number,
    id: string = randomUUID(),
  ): TelnyxEvent {
    const common = {
      ...outboundCommon(m),
      completed_at: messagingTime(at),
      errors: final.errors,
      sent_at: t(m.sentAt),
      tags: m.tags,
      to: [{ ...RECIPIENT_CARRIER, phone_number: m.to, status: final.status }],
    };
    const payload =
      final.status === 'delivered'
        ? {
            ...common,
            cost_breakdown: m.price.costBreakdown,
            from: { ...SENDER_CARRIER, phone_number: m.from, status: 'webhook_delivered' },
            tcr_campaign_billable: true,
            tcr_campaign_id: m.tcrCampaignId,
            tcr_campaign_registered: 'REGISTERED',
          }
        : { ...common, from: { ...SENDER_CARRIER, phone_number: m.from } };
    return { id, eventType: 'message.finalized', occurredAt: messagingTime(at), payload };
  },
};

function outboundCommon(m: MessageRecord) {
  return {
    cost: m.price.cost,
    direction: 'outbound',
    encoding: m.encoding,
    id: m.id,
    media: media(m, false),
    messaging_profile_id: m.messagingProfileId,
    organization_id: m.organizationId,
    parts: m.parts,
    received_at: messagingTime(m.receivedAt),
    record_type: 'message',
    text: m.text,
    type: m.type,
    valid_until: t(m.validUntil),
    webhook_url: m.webhookUrl,
  };
}

/** The `POST /v2/messages` (and GET) answer: OutboundMessagePayload, in the order of the OpenAPI example. */
export function outboundMessageResource(m: MessageRecord): Record<string, unknown> {
  const z = (ms: number | null) => (ms === null ? null : new Date(Math.floor(ms)).toISOString());
  return {
    record_type: 'message',
    direction: m.direction,
    id: m.id,
    type: m.type,
    messaging_profile_id: m.messagingProfileId,
    organization_id: m.organizationId,
    from: { phone_number: m.from, ...SENDER_CARRIER },
    to: [{ phone_number: m.to, status: m.status, ...RECIPIENT_CARRIER }],
    cc: [],
    text: m.text,
    subject: m.subject,
    media: media(m, false),
    webhook_url: m.webhookUrl,
    webhook_failover_url: m.webhookFailoverUrl,
    encoding: m.encoding,
    parts: m.parts,
    tags: m.tags,
    cost: m.price.cost,
    cost_breakdown: m.price.costBreakdown,
    tcr_campaign_id: m.tcrCampaignId,
    tcr_campaign_billable: true,
    tcr_campaign_registered: 'REGISTERED',
    received_at: z(m.receivedAt),
    sent_at: z(m.sentAt),
    completed_at: z(m.completedAt),
    valid_until: z(m.validUntil),
    errors: m.errors,
  };
}
