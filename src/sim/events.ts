// The envelope of the webhooks the simulated carrier sends, exactly as Telnyx API v2
// writes it: {"data":{event_type,id,occurred_at,payload,record_type},"meta":{attempt,
// delivered_to}} with keys in alphabetical order at every level and nulls explicit;
// the two timestamp styles (messaging 2024-01-15T21:32:13.596+00:00, voice
// 2025-11-23T03:30:00.076316Z); Telnyx-shaped ids. The payloads are
// messaging-events.ts and voice-events.ts; webhook-builders.ts crafts whole bodies
// for tests.

import { randomBytes } from 'node:crypto';

/** Every event type the simulated carrier sends: what the drop and hold knobs may name. */
export const EVENT_TYPES = [
  'message.received',
  'message.sent',
  'message.finalized',
  'call.initiated',
  'call.answered',
  'call.bridged',
  'call.hangup',
  'call.recording.saved',
  'call.recording.error',
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
