// The exact bytes of the webhooks the simulated carrier sends: Telnyx API v2
// envelopes {"data":{event_type,id,occurred_at,payload,record_type},"meta":{attempt,
// delivered_to}} with keys in alphabetical order at every level and nulls explicit,
// each payload carrying exactly the keys of the reference fixtures (telnyx.md §2,
// test/fixtures/telnyx). Messaging times look like 2024-01-15T21:32:13.596+00:00,
// voice times like 2025-11-23T03:30:00.076316Z.
//
// Two layers: `messageEvents`/`callEvents` turn the simulator's own records into events; the
// exported `telnyxWebhook` builders take a few facts (defaults for the rest) and
// return the envelope body string, so tests can craft, replay, re-send under a new
// id and reorder webhooks themselves.

import { randomBytes, randomUUID } from 'node:crypto';
import { priceOf, segmentsOf, type Encoding, type Price } from './segments.js';

/** Every event type the simulated carrier sends: what the drop and hold knobs may name. */
export const EVENT_TYPES = [
  'message.received',
  'message.sent',
  'message.finalized',
  'call.initiated',
  'call.answered',
  'call.bridged',
  'call.hangup',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export function isEventType(value: unknown): value is EventType {
  return (EVENT_TYPES as readonly unknown[]).includes(value);
}

export interface TelnyxEvent {
  id: string;
  eventType: EventType;
  /** Already formatted for its product (messaging or voice). */
  occurredAt: string;
  payload: Record<string, unknown>;
}

/** One attempt's body: the event with its meta, canonically ordered. */
export function envelopeBody(event: TelnyxEvent, attempt: number, deliveredTo: string): string {
  return canonicalJson({
    data: {
      event_type: event.eventType,
      id: event.id,
      occurred_at: event.occurredAt,
      payload: event.payload,
      record_type: 'event',
    },
    meta: { attempt, delivered_to: deliveredTo },
  });
}

/** JSON with object keys sorted at every level, the order observed on the wire. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (typeof value === 'object' && value !== null) {
    const obj = value as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(obj).sort()) {
      const v = obj[key];
      if (v === undefined) throw new Error(`webhook field "${key}" is undefined; Telnyx sends explicit nulls`);
      out[key] = sortKeys(v);
    }
    return out;
  }
  return value;
}

// ---------------------------------------------------------------------------------
// Timestamps. `ms` is milliseconds since the epoch, possibly fractional (the
// fraction becomes the microseconds of voice timestamps).

export function messagingTime(ms: number): string {
  return new Date(Math.floor(ms)).toISOString().replace('Z', '+00:00');
}

export function voiceTime(ms: number): string {
  const micros = voiceMicros(ms);
  const whole = Math.floor(micros / 1000);
  return `${new Date(whole).toISOString().slice(0, -1)}${String(micros - whole * 1000).padStart(3, '0')}Z`;
}

/** The instant a voice timestamp shows, in whole microseconds since the epoch (what voiceTime prints). */
export function voiceMicros(ms: number): number {
  const whole = Math.floor(ms);
  return whole * 1000 + Math.min(999, Math.floor((ms - whole) * 1000));
}

// ---------------------------------------------------------------------------------
// Identifiers in Telnyx's shapes.

/** `v3:` + 54 base64url characters, like the captured call_control_ids. */
export function newCallControlId(): string {
  return `v3:${randomBytes(40).toString('base64url')}`;
}

/** A numeric string like Telnyx's connection (Call Control App) ids. */
export function newConnectionId(): string {
  const digits = randomBytes(8).readBigUInt64BE() % 9_000_000_000_000_000_000n;
  return String(1_000_000_000_000_000_000n + digits);
}

// ---------------------------------------------------------------------------------
// Messaging

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

/** Delivery error codes from the Telnyx error-codes page (telnyx.md §2.1). */
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

// ---------------------------------------------------------------------------------
// Call Control

export interface LegFacts {
  callControlId: string;
  callLegId: string;
  callSessionId: string;
  connectionId: string;
  direction: 'incoming' | 'outgoing';
  from: string;
  to: string;
  /** Base64, echoed exactly as the application last set it; null when never set. */
  clientState: string | null;
  tags: string[];
  /** Simulated epoch ms of call.initiated. */
  startTime: number;
}

export type HangupSource = 'caller' | 'callee' | 'unknown';

export interface Hangup {
  cause: string;
  source: HangupSource;
  sipCause: string;
  /** Simulated ms of the answer, null when the leg never answered (no call quality stats). */
  answeredAt: number | null;
}

/** SIP response codes Telnyx reports as sip_hangup_cause for each hangup_cause. */
export const SIP_HANGUP_CAUSE: Record<string, string> = {
  normal_clearing: '200',
  originator_cancel: '487',
  timeout: '487',
  time_limit: '200',
  user_busy: '486',
  call_rejected: '603',
  not_found: '404',
  no_answer: '480',
  unspecified: 'unspecified',
};

// The simulated PSTN side of a leg, and Telnyx's SIP edge (from the capture).
const PSTN_PEER = '198.51.100.23:5060';
const TELNYX_EDGE = '192.76.120.10:5060';

function sipUser(number: string): string {
  return number.startsWith('+1') ? number.slice(2) : number.replace(/^\+/, '');
}

function legIds(leg: LegFacts) {
  return {
    call_control_id: leg.callControlId,
    call_leg_id: leg.callLegId,
    call_session_id: leg.callSessionId,
    client_state: leg.clientState,
    connection_id: leg.connectionId,
    from: leg.from,
    to: leg.to,
  };
}

function qualityStats(answeredAt: number, endedAt: number) {
  // 20 ms packetisation: 50 packets a second each way.
  const packets = Math.max(0, Math.round(((endedAt - answeredAt) / 1000) * 50));
  return {
    inbound: {
      jitter_max_variance: '0.00',
      jitter_packet_count: '0',
      mos: '4.50',
      packet_count: String(packets),
      skip_packet_count: '0',
    },
    outbound: { packet_count: String(packets), skip_packet_count: '0' },
  };
}

export const callEvents = {
  /** C1 (incoming, parked) or C4 (outgoing, bridging). */
  callInitiated(leg: LegFacts, at: number, id: string = randomUUID()): TelnyxEvent {
    const payload =
      leg.direction === 'incoming'
        ? {
            ...legIds(leg),
            caller_id_name: leg.from,
            calling_party_type: 'pstn',
            connection_codecs: 'PCMA,PCMU,VP8,H264',
            direction: 'incoming',
            from_sip_uri: `${sipUser(leg.from)}@${PSTN_PEER}`,
            offered_codecs: 'PCMU,G729',
            start_time: voiceTime(leg.startTime),
            state: 'parked',
            to_sip_uri: `${leg.to}@${TELNYX_EDGE}`,
          }
        : { ...legIds(leg), direction: 'outgoing', state: 'bridging', tags: leg.tags };
    return { id, eventType: 'call.initiated', occurredAt: voiceTime(at), payload };
  },

  /** C2. */
  callAnswered(leg: LegFacts, at: number, id: string = randomUUID()): TelnyxEvent {
    return {
      id,
      eventType: 'call.answered',
      occurredAt: voiceTime(at),
      payload: {
        ...legIds(leg),
        calling_party_type: 'pstn',
        codec: 'PCMU',
        sampling_rate: 8000,
        start_time: voiceTime(leg.startTime),
      },
    };
  },

  /** C3, with end_time as real deliveries carry it. */
  callHangup(leg: LegFacts, hangup: Hangup, at: number, id: string = randomUUID()): TelnyxEvent {
    return {
      id,
      eventType: 'call.hangup',
      occurredAt: voiceTime(at),
      payload: {
        ...legIds(leg),
        call_quality_stats: hangup.answeredAt === null ? null : qualityStats(hangup.answeredAt, at),
        calling_party_type: 'pstn',
        end_time: voiceTime(at),
        hangup_cause: hangup.cause,
        hangup_source: hangup.source,
        sip_hangup_cause: hangup.sipCause,
        start_time: voiceTime(leg.startTime),
      },
    };
  },

  /** C5. */
  callBridged(leg: LegFacts, at: number, id: string = randomUUID()): TelnyxEvent {
    return { id, eventType: 'call.bridged', occurredAt: voiceTime(at), payload: legIds(leg) };
  },
};

// ---------------------------------------------------------------------------------
// Builders for tests: a few facts in, the exact envelope body out.

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
};
