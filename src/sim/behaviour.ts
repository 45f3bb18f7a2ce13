// The misbehaviour knobs of the simulated carrier. setBehaviour(), the control API
// (PUT /_sim/behaviour) and the `handset sim` flags all write this one object, and
// every decision reads it at the moment it is taken, so a change applies to the
// next request or webhook. Rates are probabilities in [0, 1] drawn from the
// simulator's seeded stream; all default to 0: a well-behaved carrier, so a test
// opts into exactly the rumour it wants to hear.
//
// Delays given here are real milliseconds: timeScale compresses the carrier's own
// simulated time (ring, talk, receipt delays), not the knobs a test sets by hand.

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
  /** POST /v2/messages and POST /v2/calls answered 500 or 503 (error 10007), nothing done. */
  serverErrorRate: number;
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
  serverErrorRate: 0,
});

export type BehaviourKey = keyof Behaviour;
export const BEHAVIOUR_KEYS = Object.keys(WELL_BEHAVED) as BehaviourKey[];

const MAX_DELAY_MS = 600_000;

export function isRate(key: BehaviourKey): boolean {
  return key.endsWith('Rate');
}

/** `duplicateRate` → `duplicate-rate`, the CLI flag for the knob. */
export function knobFlag(key: BehaviourKey): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

export class BehaviourError extends Error {
  override name = 'BehaviourError';
}

/**
 * Checks a partial behaviour from outside (JSON body, flags): known keys only,
 * rates in [0, 1], delays in [0, 600000] ms.
 */
export function parseBehaviour(input: unknown): Partial<Behaviour> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new BehaviourError('behaviour must be a JSON object');
  }
  const out: Partial<Behaviour> = {};
  for (const [key, value] of Object.entries(input)) {
    if (!(BEHAVIOUR_KEYS as string[]).includes(key)) {
      throw new BehaviourError(`unknown knob "${key}" (knobs: ${BEHAVIOUR_KEYS.join(', ')})`);
    }
    const k = key as BehaviourKey;
    if (typeof value !== 'number' || !Number.isFinite(value)) throw new BehaviourError(`${k} must be a number`);
    if (isRate(k) && (value < 0 || value > 1)) throw new BehaviourError(`${k} must be between 0 and 1`);
    if (!isRate(k) && (value < 0 || value > MAX_DELAY_MS)) {
      throw new BehaviourError(`${k} must be between 0 and ${MAX_DELAY_MS} ms`);
    }
    out[k] = value;
  }
  return out;
}
