// Reads Twilio's messaging webhooks (status callbacks and inbound messages, form
// parameters) into normalized CarrierEvents. Twilio's callbacks carry no event
// id, type or time, so what ingest stores is built here from the verified form:
// {"params": {…every POST parameter…}, "query": {…the URL's…}, "received_at": "…",
// "handset_message": "<our message id, from the StatusCallback query>"},
// its id derived from the fact it states (a status callback: MessageSid,
// MessageStatus and ErrorCode; an inbound message: MessageSid), so a repeated
// callback stores nothing. `received_at` is when Handset first heard the fact,
// the nearest thing to a time an SMS callback has. Our message id rides in the
// StatusCallback query (`message=`), which Twilio keeps per message and signs.

import {
  MalformedCarrierEvent,
  type CarrierEvent,
  type CarrierEventKind,
  type Envelope,
  type FactSource,
  type ReceiptStatus,
  type WebhookReply,
  type WebhookRequest,
} from '../carrier.js';
import { parseForm } from './signature.js';

type Json = Record<string, unknown>;

/** Our event types for Twilio's two messaging webhooks. */
export const STATUS_EVENT = 'message.status';
export const INBOUND_EVENT = 'message.inbound';
/** The StatusCallback query parameter that carries our message id. */
export const MARKER = 'message';

const SID = /^[A-Za-z]{2}[A-Za-z0-9]{1,62}$/;
const MAX_STATUS_LENGTH = 64;

/** The stored form of a verified body: its parameters (a repeated name as a list), the URL's query and when it came. */
export function twilioStorable(raw: Buffer, req: WebhookRequest): string | null {
  const params = group(parseForm(raw));
  if (Object.keys(params).length === 0) return null;
  const query = group([...new URLSearchParams(req.url.split('?')[1] ?? '')]);
  const marker = query[MARKER];
  return JSON.stringify({
    params,
    query,
    received_at: new Date(req.nowSeconds * 1000).toISOString(),
    ...(typeof marker === 'string' && marker !== '' ? { handset_message: marker } : {}),
  });
}

function group(pairs: readonly (readonly [string, string])[]): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of pairs) {
    const had = out[k];
    out[k] = had === undefined ? v : Array.isArray(had) ? [...had, v] : [had, v];
  }
  return out;
}

export function twilioEnvelope(body: unknown): Envelope | null {
  const params = paramsOf(body);
  if (!params) return null;
  const sid = one(params, 'MessageSid') ?? one(params, 'SmsSid');
  if (!sid || !SID.test(sid)) return null;
  const status = one(params, 'MessageStatus');
  if (status !== null) {
    if (status === '' || status.length > MAX_STATUS_LENGTH) return null;
    const error = one(params, 'ErrorCode') ?? '';
    return { eventId: `status:${sid}:${status}:${error.slice(0, 16)}`, eventType: STATUS_EVENT, subject: sid };
  }
  if (one(params, 'From') && one(params, 'To'))
    return { eventId: `inbound:${sid}`, eventType: INBOUND_EVENT, subject: sid };
  return null;
}

/** An inbound message is answered with empty TwiML: nothing to reply to the sender. */
export function twilioReply(envelope: Envelope): WebhookReply | null {
  return envelope.eventType === INBOUND_EVENT
    ? { contentType: 'text/xml', body: '<?xml version="1.0" encoding="UTF-8"?><Response/>' }
    : null;
}

const EVENT_TYPES: Record<CarrierEventKind, readonly string[]> = {
  'message.received': [INBOUND_EVENT],
  'message.receipt': [STATUS_EVENT],
  'call.initiated': [],
  'call.answered': [],
  'call.hangup': [],
  'recording.saved': [],
  'recording.failed': [],
  unknown: [],
};

export const twilioEventTypes = (kind: CarrierEventKind): readonly string[] => EVENT_TYPES[kind];

// Twilio's MessageStatus → what it means for our message: queued, sending and
// sent all say the carrier has it; a read receipt after delivery says nothing new.
const RECEIPT_STATUS: Record<string, ReceiptStatus> = {
  accepted: 'sent',
  scheduled: 'sent',
  queued: 'sent',
  sending: 'sent',
  sent: 'sent',
  delivered: 'delivered',
  undelivered: 'failed',
  failed: 'failed',
  canceled: 'failed',
};

export const receiptStatusOf = (status: string): ReceiptStatus => RECEIPT_STATUS[status] ?? 'progress';

export function parseTwilioEvent(payload: unknown): CarrierEvent {
  const params = paramsOf(payload);
  if (!params) throw new MalformedCarrierEvent('no params object');
  const p = payload as Json;
  const source: FactSource = p['handset_reconciled'] === true ? 'reconciliation' : 'webhook';
  const occurredAt = new Date(typeof p['received_at'] === 'string' ? p['received_at'] : Number.NaN);
  if (Number.isNaN(occurredAt.getTime())) throw new MalformedCarrierEvent('no received_at');
  const sid = one(params, 'MessageSid') ?? one(params, 'SmsSid');
  if (!sid) throw new MalformedCarrierEvent('no MessageSid');
  const status = one(params, 'MessageStatus');
  if (status !== null) {
    const marker = p['handset_message'];
    return {
      kind: 'message.receipt',
      source,
      occurredAt,
      eventType: STATUS_EVENT,
      carrierMessageId: sid,
      carrierStatus: status,
      status: receiptStatusOf(status),
      errorCode: one(params, 'ErrorCode') || null,
      ourMessageId: typeof marker === 'string' && marker !== '' ? marker : null,
    };
  }
  const from = one(params, 'From');
  const to = one(params, 'To');
  if (!from || !to) throw new MalformedCarrierEvent('an inbound message without From and To');
  const media = Number(one(params, 'NumMedia') ?? '0');
  const mediaUrls: string[] = [];
  for (let i = 0; Number.isInteger(media) && i < Math.min(media, 10); i++) {
    const url = one(params, `MediaUrl${i}`);
    if (url) mediaUrls.push(url);
  }
  return {
    kind: 'message.received',
    source,
    occurredAt,
    carrierMessageId: sid,
    from,
    to,
    text: one(params, 'Body') ?? '',
    mediaUrls,
  };
}

function paramsOf(body: unknown): Json | null {
  const params = isObject(body) ? body['params'] : undefined;
  return isObject(params) ? params : null;
}

/** A parameter's value (the first, when repeated), or null. */
function one(params: Json, name: string): string | null {
  const v = params[name];
  const first = Array.isArray(v) ? v[0] : v;
  return typeof first === 'string' ? first : null;
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
