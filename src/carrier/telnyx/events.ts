// Reads Telnyx API v2 webhooks ({"data":{event_type,id,occurred_at,payload,record_type},"meta":{…}})
// into normalized CarrierEvents. Unknown fields are ignored; a known event type
// missing a field we need is a MalformedCarrierEvent (recorded, never retried).

import { MalformedCarrierEvent, type CarrierEvent, type Envelope, type ReceiptStatus } from '../carrier.js';

type Json = Record<string, unknown>;

const MAX_ID_LENGTH = 255;

export function telnyxEnvelope(body: unknown): Envelope | null {
  const data = isObject(body) ? body['data'] : undefined;
  if (!isObject(data)) return null;
  const eventId = data['id'];
  const eventType = data['event_type'];
  if (typeof eventId !== 'string' || eventId.length === 0 || eventId.length > MAX_ID_LENGTH) return null;
  if (typeof eventType !== 'string' || eventType.length === 0 || eventType.length > MAX_ID_LENGTH) return null;
  return { eventId, eventType };
}

// Telnyx `to[].status` → what it means for our message (CONTRACT §4, issue 4).
const RECEIPT_STATUS: Record<string, ReceiptStatus> = {
  delivered: 'delivered',
  delivery_failed: 'failed',
  sending_failed: 'failed',
  expired: 'failed',
  sent: 'sent',
  delivery_unconfirmed: 'unconfirmed',
};

export function parseTelnyxEvent(body: unknown): CarrierEvent {
  const data = isObject(body) ? body['data'] : undefined;
  if (!isObject(data)) throw new MalformedCarrierEvent('no data object');
  const eventType = str(data, 'event_type');
  const payload = data['payload'];
  if (!isObject(payload)) {
    if (KNOWN.has(eventType)) throw new MalformedCarrierEvent(`${eventType} without a payload`);
    return { kind: 'unknown', eventType };
  }
  const occurredAt = time(data, 'occurred_at') ?? new Date(NaN);
  if (Number.isNaN(occurredAt.getTime()) && KNOWN.has(eventType)) {
    throw new MalformedCarrierEvent(`${eventType} without a valid occurred_at`);
  }

  switch (eventType) {
    case 'message.received': {
      const to = firstRecipient(payload);
      const from = payload['from'];
      return {
        kind: 'message.received',
        occurredAt,
        carrierMessageId: str(payload, 'id'),
        from: isObject(from) ? str(from, 'phone_number') : str(payload, 'from'),
        to: str(to, 'phone_number'),
        text: typeof payload['text'] === 'string' ? payload['text'] : '',
        mediaUrls: Array.isArray(payload['media'])
          ? payload['media'].flatMap((m) => (isObject(m) && typeof m['url'] === 'string' ? [m['url']] : []))
          : [],
      };
    }
    case 'message.sent':
    case 'message.finalized': {
      const to = firstRecipient(payload);
      const carrierStatus = str(to, 'status');
      const errors = Array.isArray(payload['errors']) ? payload['errors'] : [];
      const first = errors[0];
      const code = isObject(first) ? first['code'] : undefined;
      return {
        kind: 'message.receipt',
        occurredAt,
        eventType,
        carrierMessageId: str(payload, 'id'),
        carrierStatus,
        status: RECEIPT_STATUS[carrierStatus] ?? 'progress',
        errorCode: typeof code === 'string' || typeof code === 'number' ? String(code) : null,
      };
    }
    case 'call.initiated': {
      const direction = str(payload, 'direction');
      if (direction !== 'incoming' && direction !== 'outgoing') {
        throw new MalformedCarrierEvent(`call.initiated with direction "${direction}"`);
      }
      return {
        kind: 'call.initiated',
        occurredAt,
        ...callLeg(payload),
        callSessionId: str(payload, 'call_session_id'),
        direction: direction === 'incoming' ? 'inbound' : 'outbound',
        from: str(payload, 'from'),
        to: str(payload, 'to'),
      };
    }
    case 'call.answered':
      return { kind: 'call.answered', occurredAt, ...callLeg(payload) };
    case 'call.hangup':
      return {
        kind: 'call.hangup',
        occurredAt,
        ...callLeg(payload),
        hangupCause: typeof payload['hangup_cause'] === 'string' ? payload['hangup_cause'] : 'unspecified',
        hangupSource: typeof payload['hangup_source'] === 'string' ? payload['hangup_source'] : null,
        startedAt: time(payload, 'start_time'),
        endedAt: time(payload, 'end_time'),
      };
    default:
      return { kind: 'unknown', eventType };
  }
}

const KNOWN = new Set(['message.received', 'message.sent', 'message.finalized', 'call.initiated', 'call.answered', 'call.hangup']);

function callLeg(payload: Json) {
  return {
    callControlId: str(payload, 'call_control_id'),
    callLegId: str(payload, 'call_leg_id'),
    clientState: decodeClientState(payload['client_state']),
  };
}

/** client_state is base64 we supplied on a command; Telnyx echoes it on every later webhook of the leg. */
export function decodeClientState(value: unknown): unknown {
  if (typeof value !== 'string' || value === '') return null;
  try {
    return JSON.parse(Buffer.from(value, 'base64').toString('utf8'));
  } catch {
    return null;
  }
}

export function encodeClientState(state: unknown): string {
  return Buffer.from(JSON.stringify(state), 'utf8').toString('base64');
}

function firstRecipient(payload: Json): Json {
  const to = payload['to'];
  const first = Array.isArray(to) ? to[0] : undefined;
  if (!isObject(first)) throw new MalformedCarrierEvent('payload.to is not a list of recipients');
  return first;
}

function str(obj: Json, key: string): string {
  const v = obj[key];
  if (typeof v !== 'string' || v === '') throw new MalformedCarrierEvent(`missing ${key}`);
  return v;
}

function time(obj: Json, key: string): Date | null {
  const v = obj[key];
  if (typeof v !== 'string') return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
