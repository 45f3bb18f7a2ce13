// Who is at the other end of a phone number: the simulated recipient's behaviour,
// like Twilio's test "magic numbers". A persona is plain data; resolvePersona
// turns it into the plan the messaging and call simulations follow.
//
// | number        | SMS to it                                          | call to it                                             |
// |---------------|----------------------------------------------------|--------------------------------------------------------|
// | +15555550100  | delivered                                          | answers after 1 s, talks 3 s                           |
// | +15555550101  | delivery_failed, error 40008 Undeliverable         | answers after 1 s, talks 3 s                           |
// | +15555550102  | sending_failed, error 40001 Not routable           | answers after 1 s, talks 3 s                           |
// | +15555550103  | refused at send: HTTP 422, error 40310 Invalid 'to'| answers after 1 s, talks 3 s                           |
// | +15555550104  | delivery_unconfirmed                               | answers after 1 s, talks 3 s                           |
// | +15555550105  | message.sent only, never finalized                 | answers after 1 s, talks 3 s                           |
// | +15555550106  | expired, error 40014 Expired in queue              | answers after 1 s, talks 3 s                           |
// | +15555550110  | delivered                                          | never answers: hangup `timeout` after timeout_secs     |
// | +15555550111  | delivered                                          | busy: hangup `user_busy` after 1 s                     |
// | +15555550112  | delivered                                          | rejects: hangup `call_rejected` after 1 s              |
// | +15555550113  | delivered                                          | answers after 2 s, talks 5 s                           |
// | +15555550114  | delivered                                          | answers after 1 s, stays until hung up                 |
// | +15555550115  | delivered                                          | manual: nothing after call.initiated; drive it with    |
// |               |                                                    | answer()/hangup() or POST /_sim/calls/{id}/answer|hangup |
// | +15555550116  | delivered                                          | answers after 1 s, talks 3 s; a recording of it fails: |
// |               |                                                    | call.recording.error instead of call.recording.saved   |
// | any other     | delivered                                          | answers after 1 s, talks 3 s                           |
//
// Receipt timing for SMS: message.sent 100 ms after the send is accepted,
// message.finalized 1 s after that. All times are simulated: multiplied by timeScale.
//
// A persona can also lose or hold back the webhooks of the resources it is the
// far end of (an outgoing message or leg to it, an inbound message or call from
// it), deterministically, for tests of a carrier gone silent:
//   lose: ["call.hangup"]           those event types never arrive (not one attempt)
//   hold: {"call.answered": 8000}   those arrive this many simulated ms after they
//                                   happened, overtaken by the resource's later events
// So with {"call":{"talkMs":3000},"hold":{"call.answered":5000}} the answer of a
// leg arrives 2 s (simulated) after its hangup; with {"call":{"hangupCause":
// "timeout"},"lose":["call.hangup"]} a ringing leg times out unheard.
//
// `recording: "error"` makes every recording of a leg to or from the number end
// in call.recording.error (reason "Internal server error") instead of
// call.recording.saved; the default is "saved".

import { EVENT_TYPES, isEventType, type EventType } from './events.js';
import type { DeliveryPolicy } from './webhooks.js';

export type SmsOutcome =
  | 'delivered'
  | 'delivery_failed'
  | 'sending_failed'
  | 'expired'
  | 'delivery_unconfirmed'
  | 'sent_only'
  | 'rejected';

export const SMS_OUTCOMES: readonly SmsOutcome[] = [
  'delivered',
  'delivery_failed',
  'sending_failed',
  'expired',
  'delivery_unconfirmed',
  'sent_only',
  'rejected',
];

export type RecordingOutcome = 'saved' | 'error';

export type RefusalCause = 'user_busy' | 'call_rejected' | 'timeout';

export interface CallPersona {
  /** Simulated ms from call.initiated to call.answered (default 1000). */
  answerAfterMs?: number;
  /** Simulated ms from answer to the callee's hangup; null = stays until someone hangs up (default 3000). */
  talkMs?: number | null;
  /** Never answers: `timeout` hangs up after the dial's timeout_secs, the others after hangupAfterMs. */
  hangupCause?: RefusalCause;
  /** For user_busy / call_rejected (default 1000). */
  hangupAfterMs?: number;
  /** No automatic events after call.initiated. */
  manual?: boolean;
}

export interface Persona {
  sms?: SmsOutcome;
  /** The errors[0].code of a failed finalized receipt; defaults per outcome (40008, 40001, 40014). */
  smsErrorCode?: string;
  call?: CallPersona;
  /** Event types of its resources that are lost for good. */
  lose?: EventType[];
  /** Event type → simulated ms its events are held back, out of their resource's lane. */
  hold?: Partial<Record<EventType, number>>;
  /** What becomes of a recording of its calls (default saved). */
  recording?: RecordingOutcome;
}

export type CallPlan =
  | { kind: 'answers'; answerAfterMs: number; talkMs: number | null }
  | { kind: 'refuses'; hangupCause: 'user_busy' | 'call_rejected'; afterMs: number }
  | { kind: 'never_answers' }
  | { kind: 'manual' };

export interface ResolvedPersona {
  sms: SmsOutcome;
  smsErrorCode: string | null;
  call: CallPlan;
  delivery: DeliveryPolicy;
  recording: RecordingOutcome;
}

export const SMS_SENT_AFTER_MS = 100;
export const SMS_FINALIZED_AFTER_MS = 1000;

const DEFAULT_ANSWER_AFTER_MS = 1000;
const DEFAULT_TALK_MS = 3000;
const DEFAULT_REFUSE_AFTER_MS = 1000;

const DEFAULT_ERROR_CODE: Partial<Record<SmsOutcome, string>> = {
  delivery_failed: '40008',
  sending_failed: '40001',
  expired: '40014',
};

export const MAGIC_PERSONAS: Readonly<Record<string, Persona>> = Object.freeze({
  '+15555550100': { sms: 'delivered' },
  '+15555550101': { sms: 'delivery_failed', smsErrorCode: '40008' },
  '+15555550102': { sms: 'sending_failed', smsErrorCode: '40001' },
  '+15555550103': { sms: 'rejected' },
  '+15555550104': { sms: 'delivery_unconfirmed' },
  '+15555550105': { sms: 'sent_only' },
  '+15555550106': { sms: 'expired', smsErrorCode: '40014' },
  '+15555550110': { call: { hangupCause: 'timeout' } },
  '+15555550111': { call: { hangupCause: 'user_busy', hangupAfterMs: 1000 } },
  '+15555550112': { call: { hangupCause: 'call_rejected', hangupAfterMs: 1000 } },
  '+15555550113': { call: { answerAfterMs: 2000, talkMs: 5000 } },
  '+15555550114': { call: { answerAfterMs: 1000, talkMs: null } },
  '+15555550115': { call: { manual: true } },
  '+15555550116': { recording: 'error' },
});

export function resolvePersona(p: Persona): ResolvedPersona {
  const sms = p.sms ?? 'delivered';
  return {
    sms,
    smsErrorCode: p.smsErrorCode ?? DEFAULT_ERROR_CODE[sms] ?? null,
    call: callPlan(p.call ?? {}),
    delivery: { lose: p.lose ?? [], hold: p.hold ?? {} },
    recording: p.recording ?? 'saved',
  };
}

function callPlan(c: CallPersona): CallPlan {
  if (c.manual) return { kind: 'manual' };
  if (c.hangupCause === 'timeout') return { kind: 'never_answers' };
  if (c.hangupCause)
    return { kind: 'refuses', hangupCause: c.hangupCause, afterMs: c.hangupAfterMs ?? DEFAULT_REFUSE_AFTER_MS };
  return {
    kind: 'answers',
    answerAfterMs: c.answerAfterMs ?? DEFAULT_ANSWER_AFTER_MS,
    talkMs: c.talkMs === undefined ? DEFAULT_TALK_MS : c.talkMs,
  };
}

/** The magic numbers, the start-up overrides, then setPersona() overrides (which replace, not merge). */
export class PersonaBook {
  private overrides = new Map<string, Persona>();

  constructor(private readonly initial: Readonly<Record<string, Persona>> = {}) {
    this.reset();
  }

  lookup(number: string): ResolvedPersona {
    return resolvePersona(this.overrides.get(number) ?? MAGIC_PERSONAS[number] ?? {});
  }

  set(number: string, persona: Persona): void {
    this.overrides.set(number, persona);
  }

  reset(): void {
    this.overrides = new Map(Object.entries(this.initial));
  }

  /** Every number with a persona other than the default, as data. */
  list(): Record<string, Persona> {
    return { ...MAGIC_PERSONAS, ...Object.fromEntries(this.overrides) };
  }
}

export class PersonaError extends Error {
  override name = 'PersonaError';
}

const MAX_PERSONA_MS = 3_600_000;

/** Validates a persona from JSON (the control API, CLI). */
export function parsePersona(input: unknown): Persona {
  if (!isObject(input)) throw new PersonaError('a persona is a JSON object');
  for (const key of Object.keys(input)) {
    if (!['sms', 'smsErrorCode', 'call', 'lose', 'hold', 'recording'].includes(key)) {
      throw new PersonaError(`unknown persona field "${key}"`);
    }
  }
  const out: Persona = {};
  if (input['sms'] !== undefined) {
    if (!SMS_OUTCOMES.includes(input['sms'] as SmsOutcome)) {
      throw new PersonaError(`sms must be one of ${SMS_OUTCOMES.join(', ')}`);
    }
    out.sms = input['sms'] as SmsOutcome;
  }
  if (input['smsErrorCode'] !== undefined) {
    if (typeof input['smsErrorCode'] !== 'string' || !/^\d{5}$/.test(input['smsErrorCode'])) {
      throw new PersonaError('smsErrorCode must be a five-digit Telnyx code such as "40008"');
    }
    out.smsErrorCode = input['smsErrorCode'];
  }
  if (input['call'] !== undefined) out.call = parseCallPersona(input['call']);
  if (input['recording'] !== undefined) {
    if (input['recording'] !== 'saved' && input['recording'] !== 'error') {
      throw new PersonaError('recording must be "saved" or "error"');
    }
    out.recording = input['recording'];
  }
  if (input['lose'] !== undefined) {
    const lose = input['lose'];
    if (!Array.isArray(lose) || !lose.every(isEventType)) {
      throw new PersonaError(`lose must be a list of event types (${EVENT_TYPES.join(', ')})`);
    }
    out.lose = [...new Set(lose)];
  }
  if (input['hold'] !== undefined) {
    const hold = input['hold'];
    if (!isObject(hold)) throw new PersonaError('hold must be an object of event type → simulated ms');
    out.hold = {};
    for (const [type, ms] of Object.entries(hold)) {
      if (!isEventType(type)) throw new PersonaError(`hold: unknown event type "${type}" (${EVENT_TYPES.join(', ')})`);
      out.hold[type] = duration(`hold["${type}"]`, ms);
    }
  }
  return out;
}

function parseCallPersona(input: unknown): CallPersona {
  if (!isObject(input)) throw new PersonaError('call must be a JSON object');
  const out: CallPersona = {};
  for (const [key, value] of Object.entries(input)) {
    switch (key) {
      case 'answerAfterMs':
      case 'hangupAfterMs':
        out[key] = duration(`call.${key}`, value);
        break;
      case 'talkMs':
        out.talkMs = value === null ? null : duration(`call.${key}`, value);
        break;
      case 'hangupCause':
        if (value !== 'user_busy' && value !== 'call_rejected' && value !== 'timeout') {
          throw new PersonaError('call.hangupCause must be user_busy, call_rejected or timeout');
        }
        out.hangupCause = value;
        break;
      case 'manual':
        if (typeof value !== 'boolean') throw new PersonaError('call.manual must be a boolean');
        out.manual = value;
        break;
      default:
        throw new PersonaError(`unknown call persona field "${key}"`);
    }
  }
  return out;
}

function duration(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_PERSONA_MS) {
    throw new PersonaError(`${name} must be a number of ms between 0 and ${MAX_PERSONA_MS}`);
  }
  return value;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
