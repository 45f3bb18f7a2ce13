// The misbehaviour knobs of the simulated carrier. setBehaviour(), the control API
// (PUT /_sim/behaviour) and the `handset sim` flags all write this one object, and
// every decision reads it at the moment it is taken, so a change applies to the
// next request or webhook. Rates are probabilities in [0, 1] drawn from the
// simulator's seeded stream; all default to 0: a well-behaved carrier, so a test
// opts into exactly the rumour it wants to hear. A knob added since the first
// ones draws from the stream only when it is set, so a seed replays the same run
// as before for everyone who leaves it at 0.
//
// Delays given here are real milliseconds: timeScale compresses the carrier's own
// simulated time (ring, talk, receipt delays), not the knobs a test sets by hand.
//
// A knob's kind follows from its name: `…Rate` a probability, `…Ms` a delay,
// `…Rates` a probability per event type ({"call.hangup": 1}).

import { EVENT_TYPES, isEventType, type EventType } from './events.js';

export interface Behaviour {
  /** Deliver an event a second time, same data.id (a non-retry duplicate). */
  duplicateRate: number;
  /** Deliver the same fact again under a new data.id. */
  resendNewIdRate: number;
  /** Hold each webhook back by a random 0..window ms, so they arrive out of order. */
  reorderWindowMs: number;
  /** After a `delivered` message.finalized, also send a `delivery_failed` one under a new id. */
  contradictionRate: number;
  /** Fire a message's receipts, and wait for their answers, before answering POST /v2/messages. */
  earlyReceiptRate: number;
  /** Added before answering every /v2 request. */
  sendLatencyMs: number;
  /** POST /v2/messages and POST /v2/calls refused with a 4xx (40300 blocked; 10010 for calls). */
  rejectRate: number;
  /** POST /v2/messages and POST /v2/calls answered 429 with retry-after and error 10011. */
  rateLimitRate: number;
  /** The wait a 429 asks for, in its Retry-After (whole seconds, rounded up; 0: one second). */
  retryAfterMs: number;
  /** POST /v2/messages and POST /v2/calls answered 500 or 503 (error 10007), nothing done. */
  serverErrorRate: number;
  /** A send (POST /v2/messages, /v2/calls) is carried out, then answered only after this long. */
  answerDelayMs: number;
  /** A send is carried out, then its connection is destroyed without an answer. */
  lostAnswerRate: number;
  /** A send is carried out, then answered with 200, headers and half the body, never the rest. */
  stalledBodyRate: number;
  /** An event is lost for good: not one attempt (the resource's state at the carrier still moves). */
  dropRate: number;
  /** Per event type, in place of dropRate for that type: {"call.hangup": 1}. Replaced whole when set. */
  dropRates: Readonly<Partial<Record<EventType, number>>>;
  /** An event is held back holdMinMs..holdMaxMs and leaves its resource's lane (later events overtake it). */
  holdRate: number;
  holdMinMs: number;
  holdMaxMs: number;
  /** POST /v2/ai/audio/transcriptions answered 500 (OpenAI-style error body), nothing transcribed. */
  transcriptionErrorRate: number;
}

export const WELL_BEHAVED: Readonly<Behaviour> = Object.freeze({
  duplicateRate: 0,
  resendNewIdRate: 0,
  reorderWindowMs: 0,
  contradictionRate: 0,
  earlyReceiptRate: 0,
  sendLatencyMs: 0,
  rejectRate: 0,
  rateLimitRate: 0,
  retryAfterMs: 0,
  serverErrorRate: 0,
  answerDelayMs: 0,
  lostAnswerRate: 0,
  stalledBodyRate: 0,
  dropRate: 0,
  dropRates: Object.freeze({}),
  holdRate: 0,
  holdMinMs: 0,
  holdMaxMs: 0,
  transcriptionErrorRate: 0,
});

export type BehaviourKey = keyof Behaviour;
export const BEHAVIOUR_KEYS = Object.keys(WELL_BEHAVED) as BehaviourKey[];

/** One line each, for `handset sim --help`. */
export const KNOB_HELP: Readonly<Record<BehaviourKey, string>> = {
  duplicateRate: 'deliver an event twice, same data.id',
  resendNewIdRate: 'deliver the same fact again under a new data.id',
  reorderWindowMs: 'hold each webhook back 0..MS at random (out of order)',
  contradictionRate: 'follow a delivered receipt with a delivery_failed one',
  earlyReceiptRate: 'receipts answered before POST /v2/messages answers',
  sendLatencyMs: 'wait MS before answering every /v2 request',
  rejectRate: 'refuse a send or dial with a 4xx (40300, 10010)',
  rateLimitRate: 'answer a send or dial 429 (10011), nothing done',
  retryAfterMs: 'the Retry-After a 429 asks for (whole seconds; 0: 1 s)',
  serverErrorRate: 'answer a send or dial 500/503 (10007), nothing done',
  answerDelayMs: 'carry out a send or dial, answer it only MS later',
  lostAnswerRate: 'carry out a send or dial, then cut the connection',
  stalledBodyRate: 'carry out a send or dial, answer 200 and never finish the body',
  dropRate: 'lose an event for good: no attempt at all',
  dropRates: 'per event type, in place of --drop-rate (e.g. call.hangup=1)',
  holdRate: 'deliver an event late, letting later ones overtake it',
  holdMinMs: 'shortest hold of a held event',
  holdMaxMs: 'longest hold of a held event',
  transcriptionErrorRate: 'answer a speech-to-text request 500, nothing transcribed',
};

const MAX_DELAY_MS = 600_000;

export type KnobKind = 'rate' | 'delay' | 'rates';

export function knobKind(key: BehaviourKey): KnobKind {
  if (key.endsWith('Rates')) return 'rates';
  if (key.endsWith('Rate')) return 'rate';
  return 'delay';
}

/** `duplicateRate` → `duplicate-rate`, the CLI flag for the knob. */
export function knobFlag(key: BehaviourKey): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** The Retry-After, in seconds, that a 429 states under this behaviour. */
export function retryAfterSeconds(b: Behaviour): number {
  return b.retryAfterMs > 0 ? Math.ceil(b.retryAfterMs / 1000) : 1;
}

export class BehaviourError extends Error {
  override name = 'BehaviourError';
}

/**
 * Checks a partial behaviour from outside (JSON body, flags): known keys only,
 * rates in [0, 1], delays in [0, 600000] ms, per-type rates keyed by the event
 * types the simulator sends.
 */
export function parseBehaviour(input: unknown): Partial<Behaviour> {
  if (!isObject(input)) throw new BehaviourError('behaviour must be a JSON object');
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(input)) {
    if (!(BEHAVIOUR_KEYS as string[]).includes(key)) {
      throw new BehaviourError(`unknown knob "${key}" (knobs: ${BEHAVIOUR_KEYS.join(', ')})`);
    }
    const k = key as BehaviourKey;
    switch (knobKind(k)) {
      case 'rate':
        out[k] = rate(k, value);
        break;
      case 'delay':
        if (typeof value !== 'number' || !Number.isFinite(value)) throw new BehaviourError(`${k} must be a number`);
        if (value < 0 || value > MAX_DELAY_MS) {
          throw new BehaviourError(`${k} must be between 0 and ${MAX_DELAY_MS} ms`);
        }
        out[k] = value;
        break;
      case 'rates': {
        if (!isObject(value)) throw new BehaviourError(`${k} must be an object of event type → rate`);
        const rates: Partial<Record<EventType, number>> = {};
        for (const [type, r] of Object.entries(value)) {
          if (!isEventType(type)) {
            throw new BehaviourError(`${k}: unknown event type "${type}" (${EVENT_TYPES.join(', ')})`);
          }
          rates[type] = rate(`${k}["${type}"]`, r);
        }
        out[k] = Object.freeze(rates);
      }
    }
  }
  return out as Partial<Behaviour>;
}

/** What only the whole behaviour can say: a hold window that is not upside down. */
export function checkBehaviour(b: Behaviour): Behaviour {
  if (b.holdMinMs > b.holdMaxMs) {
    throw new BehaviourError(`holdMinMs (${b.holdMinMs}) must not be above holdMaxMs (${b.holdMaxMs})`);
  }
  return b;
}

/** `TYPE=P,TYPE=P` (the CLI form of a per-type knob) → {TYPE: P}, left for parseBehaviour to check. */
export function parseRatesFlag(flag: string, raw: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of raw.split(',')) {
    const [type, p, ...rest] = part.split('=');
    const n = Number(p);
    if (!type || p === undefined || p.trim() === '' || rest.length > 0 || !Number.isFinite(n)) {
      throw new BehaviourError(`${flag} takes TYPE=P[,TYPE=P…], got "${raw}"`);
    }
    out[type.trim()] = n;
  }
  return out;
}

/** The knobs that differ from a well-behaved carrier, as `name=value` words. */
export function describeBehaviour(b: Behaviour): string[] {
  return BEHAVIOUR_KEYS.flatMap((k) => {
    const v = b[k];
    if (typeof v === 'number') return v === WELL_BEHAVED[k] ? [] : [`${k}=${v}`];
    const entries = Object.entries(v);
    return entries.length === 0 ? [] : [`${k}=${entries.map(([t, p]) => `${t}:${p}`).join(',')}`];
  });
}

function rate(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new BehaviourError(`${name} must be a number`);
  if (value < 0 || value > 1) throw new BehaviourError(`${name} must be between 0 and 1`);
  return value;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
