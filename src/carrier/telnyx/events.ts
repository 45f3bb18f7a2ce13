// Reads Telnyx API v2 webhooks ({"data":{event_type,id,occurred_at,payload,record_type},"meta":{…}})
// into normalized CarrierEvents. Unknown fields are ignored; a known event type
// missing a field we need is a MalformedCarrierEvent (recorded, never retried).

import {
  MalformedCarrierEvent,
  type CarrierEvent,
  type CarrierEventKind,
  type Envelope,
  type FactSource,
  type ReceiptStatus,
} from '../carrier.js';

type Json = Record<string, unknown>;

const MAX_ID_LENGTH = 255;

export function telnyxEnvelope(body: unknown): Envelope | null {
  const data = isObject(body) ? body['data'] : undefined;
  if (!isObject(data)) return null;
  const eventId = data['id'];
  const eventType = data['event_type'];
  if (typeof eventId !== 'string' || eventId.length === 0 || eventId.length > MAX_ID_LENGTH) return null;
  if (typeof eventType !== 'string' || eventType.length === 0 || eventType.length > MAX_ID_LENGTH) return null;
  return { eventId, eventType, subject: subjectOf(data['payload']) };
}

/** The resource an event is about: the leg's call_control_id for voice, the message id for messaging. */
function subjectOf(payload: unknown): string | null {
  if (!isObject(payload)) return null;
  const id = payload['call_control_id'] ?? payload['id'];
  return typeof id === 'string' && id.length > 0 && id.length <= MAX_ID_LENGTH ? id : null;
}

/** Telnyx's event types for each kind of carrier event (they happen to share our names). */
const EVENT_TYPES: Record<CarrierEventKind, readonly string[]> = {
  'message.received': ['message.received'],
  'message.receipt': ['message.sent', 'message.finalized'],
  'call.initiated': ['call.initiated'],
  'call.answered': ['call.answered'],
  'call.hangup': ['call.hangup'],
  'recording.saved': ['call.recording.saved'],
  'recording.failed': ['call.recording.error'],
  unknown: [],
};

export const telnyxEventTypes = (kind: CarrierEventKind): readonly string[] => EVENT_TYPES[kind];

// A hangup cause that means the leg was never connected; any other cause (a
// normal clearing, a time limit, one we do not know) may follow an answer.
const NEVER_CONNECTED = new Set([
  'timeout',
  'user_busy',
  'call_rejected',
  'originator_cancel',
  'no_answer',
  'not_found',
]);

/**
 * Whether a hangup says its leg was connected. An event Handset built from a
 * lookup carries the carrier's call_duration. In a webhook the cause decides
 * first (a timeout or busy leg never connected, whatever else it carries); call
 * quality statistics or a normal clearing mean it did.
 */
function connectedOf(payload: Json): boolean | null {
  const duration = payload['call_duration'];
  if (typeof duration === 'number') return duration > 0;
  const cause = payload['hangup_cause'];
  if (typeof cause === 'string' && NEVER_CONNECTED.has(cause)) return false;
  if (cause === 'normal_clearing' || cause === 'time_limit' || isObject(payload['call_quality_stats'])) return true;
  return null;
}

// Telnyx `to[].status` → what it means for our message.
const RECEIPT_STATUS: Record<string, ReceiptStatus> = {
  delivered: 'delivered',
  delivery_failed: 'failed',
  sending_failed: 'failed',
  expired: 'failed',
  sent: 'sent',
  delivery_unconfirmed: 'unconfirmed',
};

export const receiptStatusOf = (carrierStatus: string): ReceiptStatus => RECEIPT_STATUS[carrierStatus] ?? 'progress';

export function parseTelnyxEvent(body: unknown): CarrierEvent {
  const data = isObject(body) ? body['data'] : undefined;
  if (!isObject(data)) throw new MalformedCarrierEvent('no data object');
  const eventType = str(data, 'event_type');
  const payload = data['payload'];
  // Events Handset stored from a lookup say so in meta; the carrier never sends it.
  const meta = isObject(body) ? body['meta'] : undefined;
  const source: FactSource = isObject(meta) && meta['handset_reconciled'] === true ? 'reconciliation' : 'webhook';
  if (!isObject(payload)) {
    if (KNOWN.has(eventType)) throw new MalformedCarrierEvent(`${eventType} without a payload`);
    return { kind: 'unknown', eventType, source };
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
        source,
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
        source,
        occurredAt,
        eventType,
        carrierMessageId: str(payload, 'id'),
        carrierStatus,
        status: receiptStatusOf(carrierStatus),
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
        source,
        occurredAt,
        ...callLeg(payload),
        direction: direction === 'incoming' ? 'inbound' : 'outbound',
        from: str(payload, 'from'),
        to: str(payload, 'to'),
      };
    }
    case 'call.answered':
      return { kind: 'call.answered', source, occurredAt, ...callLeg(payload) };
    case 'call.hangup':
      return {
        kind: 'call.hangup',
        source,
        occurredAt,
        ...callLeg(payload),
        hangupCause: typeof payload['hangup_cause'] === 'string' ? payload['hangup_cause'] : 'unspecified',
        connected: connectedOf(payload),
        startedAt: time(payload, 'start_time'),
        endedAt: time(payload, 'end_time'),
      };
    case 'call.recording.saved': {
      const startedAt = time(payload, 'recording_started_at');
      const endedAt = time(payload, 'recording_ended_at');
      if (!startedAt || !endedAt) throw new MalformedCarrierEvent('call.recording.saved without its start and end');
      const leg = callLeg(payload);
      const { format, audioUrl } = recordingUrl(payload['recording_urls']);
      return {
        kind: 'recording.saved',
        source,
        occurredAt,
        ...leg,
        // Telnyx's payload names the recording; without an id, the leg and the moment it began identify it.
        recordingId:
          typeof payload['recording_id'] === 'string' && payload['recording_id'] !== ''
            ? payload['recording_id']
            : `${leg.leg}@${startedAt.toISOString()}`,
        startedAt,
        endedAt,
        audioUrl,
        format,
      };
    }
    case 'call.recording.error':
      return {
        kind: 'recording.failed',
        source,
        occurredAt,
        ...callLeg(payload),
        reason: String(payload['reason'] ?? payload['error'] ?? 'the carrier could not record the call'),
      };
    default:
      return { kind: 'unknown', eventType, source };
  }
}

const KNOWN = new Set([
  'message.received',
  'message.sent',
  'message.finalized',
  'call.initiated',
  'call.answered',
  'call.hangup',
  'call.recording.saved',
  'call.recording.error',
]);

/** A Call Control payload's leg (its call_control_id) and our state echoed back (client_state). */
function callLeg(payload: Json) {
  return {
    leg: str(payload, 'call_control_id'),
    echo: decodeClientState(payload['client_state']),
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

/**
 * The first address in a recording's urls object (`recording_urls` in its
 * webhook, `download_urls` in the REST resource: `{ "wav": "https://…" }`), and
 * the format it names.
 */
export function recordingUrl(urls: unknown): { format: string | null; audioUrl: string | null } {
  const found = isObject(urls) ? Object.entries(urls).find(([, u]) => typeof u === 'string' && u !== '') : undefined;
  return found ? { format: found[0], audioUrl: found[1] as string } : { format: null, audioUrl: null };
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
