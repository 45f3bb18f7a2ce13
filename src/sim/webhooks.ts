// Sends the simulated carrier's webhooks the way Telnyx does:
// POST with content-type application/json and user-agent telnyx-webhooks, signed
// with Ed25519 over "<timestamp>|<body>" with a fresh timestamp on every attempt.
// A non-2xx answer (3xx included) or no answer within 2 s is a failure: up to 3
// attempts per URL with backoff, same data.id, meta.attempt counting up across
// the primary and then each fallback URL.
//
// A well-behaved carrier tells one resource's story in order: the events of one
// message or call leg (its "lane") start their first attempt only after the
// previous event's first attempt was answered (a retry does not hold the lane).
// Telnyx promises no ordering, and the rumours break it on purpose: a second copy
// under the same id (duplicateRate), the same fact under a new id
// (resendNewIdRate), and a random hold-back of each delivery (reorderWindowMs,
// which also turns the lanes off). Copies never spawn copies.
//
// Telnyx also gives up on a webhook after its retries, and an outage longer than
// that loses it for good. A lost event (dropRate, dropRates, a persona's `lose`)
// makes no attempt at all, copies included; the resource it tells of has moved at
// the carrier all the same, so a REST lookup tells the truth the webhook did not.
// A held event (holdRate, a persona's `hold`) goes out late, copies with it, and
// leaves its lane: the later events of its resource overtake it (a hangup before
// its leg's answer).

import { randomUUID, type KeyObject } from 'node:crypto';
import type { Logger } from 'pino';
import { signTelnyxWebhook } from '../carrier/telnyx/signature.js';
import type { Behaviour } from './behaviour.js';
import { envelopeBody, type EventType, type TelnyxEvent } from './events.js';
import type { Random } from './random.js';
import type { Scheduler } from './scheduler.js';

export const ATTEMPTS_PER_URL = 3;
/** Telnyx's answer deadline for API v2 webhooks: real time, the receiver's budget. */
export const ANSWER_TIMEOUT_MS = 2000;
/**
 * Backoff before the 2nd and 3rd attempt at one URL, in real time like the answer
 * deadline: it is the carrier's webhook system, not a call's timeline, so
 * compressing simulated time does not shorten how long the carrier keeps trying
 * (a receiver down for a few seconds loses nothing, one down longer loses the webhook).
 */
const RETRY_BACKOFF_MS = [1000, 2000];

/** Why this delivery exists: the event itself, or a rumour about it. */
export type DeliveryCopy = 'original' | 'duplicate' | 'resend' | 'contradiction' | 'manual';

export interface WebhookAttempt {
  seq: number;
  /** Wall-clock ISO time the attempt was answered (or failed). */
  at: string;
  eventId: string | null;
  eventType: string | null;
  copy: DeliveryCopy;
  attempt: number;
  url: string;
  /** The HTTP status, or null when there was no answer (see error). */
  status: number | null;
  error: string | null;
  /** The exact bytes sent. */
  body: string;
}

/** A resource's own misbehaviour, from the persona at its far end. */
export interface DeliveryPolicy {
  /** Event types lost for good. */
  lose: readonly EventType[];
  /** Event type → simulated ms its events are held back. */
  hold: Readonly<Partial<Record<EventType, number>>>;
}

export const NO_POLICY: DeliveryPolicy = Object.freeze({ lose: Object.freeze([]), hold: Object.freeze({}) });

/** An event lost for good, kept so a test can tell which, or deliver its body very late itself. */
export interface DroppedEvent {
  seq: number;
  /** Wall-clock ISO time it was dropped. */
  at: string;
  eventId: string;
  eventType: EventType;
  copy: 'original' | 'contradiction';
  /** `persona` (its `lose` list) or `behaviour` (dropRate, dropRates). */
  reason: 'persona' | 'behaviour';
  /** The primary URL it would have gone to. */
  url: string;
  /** The body its first attempt would have carried (attempt 1, to `url`). */
  body: string;
}

export interface WebhookCounts {
  /** Events the carrier decided to tell (originals and contradictions), dropped ones included. */
  events: number;
  /** Events lost for good: not one attempt. */
  dropped: number;
  /** Events held back out of their lane. */
  held: number;
  duplicates: number;
  resends: number;
  attempts: number;
  /** Deliveries whose every attempt failed. */
  failedDeliveries: number;
  /** Attempts not answered 2xx, by what came back: the status, or why none did ("no answer within 2000 ms"). */
  failedAttempts: Record<string, number>;
  /** Events with no URL to go to (no profile webhook URL and none on the resource). */
  undeliverable: number;
}

export interface WebhookSenderDeps {
  privateKey: KeyObject;
  scheduler: Scheduler;
  random: Random;
  behaviour: () => Behaviour;
  record: (attempt: Omit<WebhookAttempt, 'seq'>) => void;
  recordDropped: (dropped: Omit<DroppedEvent, 'seq'>) => void;
  log: Logger;
}

export function emptyWebhookCounts(): WebhookCounts {
  return {
    events: 0,
    dropped: 0,
    held: 0,
    duplicates: 0,
    resends: 0,
    attempts: 0,
    failedDeliveries: 0,
    failedAttempts: {},
    undeliverable: 0,
  };
}

export class WebhookSender {
  counts = emptyWebhookCounts();
  /** Per resource: resolves when its latest event's first attempt was answered. */
  private lanes = new Map<string, Promise<void>>();

  constructor(private readonly deps: WebhookSenderDeps) {}

  /**
   * Tells `urls` (in priority order) about an event, with whatever rumours the
   * behaviour and the resource's policy ask for. Resolves once the original's
   * first attempt was answered (or failed): the early-receipt path waits on
   * exactly that. A lost or held event resolves at once: nothing to wait for.
   */
  emit(
    event: TelnyxEvent,
    urls: ReadonlyArray<string | null | undefined>,
    opts: { copy?: 'original' | 'contradiction'; early?: boolean; lane?: string; policy?: DeliveryPolicy } = {},
  ): Promise<void> {
    const targets = [...new Set(urls.filter((u): u is string => typeof u === 'string' && u !== ''))];
    this.counts.events++;
    if (targets.length === 0) {
      this.counts.undeliverable++;
      return Promise.resolve();
    }
    const b = this.deps.behaviour();
    const policy = opts.policy ?? NO_POLICY;
    const copy = opts.copy ?? 'original';
    const lost = this.lost(event.eventType, policy, b);
    if (lost !== null) {
      this.counts.dropped++;
      const url = targets[0]!;
      this.deps.recordDropped({
        at: new Date(this.deps.scheduler.wallNow()).toISOString(),
        eventId: event.id,
        eventType: event.eventType,
        copy,
        reason: lost,
        url,
        body: envelopeBody(event, 1, url),
      });
      return Promise.resolve();
    }
    const heldMs = this.heldFor(event.eventType, policy, b);
    // Captured now: an event emitted before reset() must not go out after it.
    const signal = this.deps.scheduler.signal;
    let first: Promise<void>;
    if (heldMs !== null) {
      this.counts.held++;
      void this.launch(event, targets, copy, heldMs, signal);
      first = Promise.resolve();
    } else if (opts.lane !== undefined && b.reorderWindowMs === 0) {
      const lane = opts.lane;
      const previous = this.lanes.get(lane);
      first = previous
        ? previous.then(() => this.launch(event, targets, copy, 0, signal))
        : this.launch(event, targets, copy, 0, signal);
      this.lanes.set(lane, first);
      void first.then(() => {
        if (this.lanes.get(lane) === first) this.lanes.delete(lane);
      });
    } else {
      first = this.launch(event, targets, copy, opts.early ? 0 : this.holdBack(b), signal);
    }
    // A held fact arrives late, whichever copy tells it.
    const copyDelay = () => (heldMs ?? 0) + this.holdBack(b);
    if (this.deps.random() < b.duplicateRate) {
      this.counts.duplicates++;
      void this.launch(event, targets, 'duplicate', copyDelay(), signal);
    }
    if (this.deps.random() < b.resendNewIdRate) {
      this.counts.resends++;
      void this.launch({ ...event, id: randomUUID() }, targets, 'resend', copyDelay(), signal);
    }
    return first;
  }

  /** Why an event is lost for good, or null. The persona decides first; a behaviour rate draws only when set. */
  private lost(type: EventType, policy: DeliveryPolicy, b: Behaviour): DroppedEvent['reason'] | null {
    if (policy.lose.includes(type)) return 'persona';
    const rate = b.dropRates[type] ?? b.dropRate;
    return rate > 0 && this.deps.random() < rate ? 'behaviour' : null;
  }

  /** Real ms an event is held back out of its lane, or null. */
  private heldFor(type: EventType, policy: DeliveryPolicy, b: Behaviour): number | null {
    const planned = policy.hold[type];
    if (planned !== undefined) return planned * this.deps.scheduler.timeScale;
    if (!(b.holdRate > 0 && this.deps.random() < b.holdRate)) return null;
    const spread = b.holdMaxMs - b.holdMinMs;
    return b.holdMinMs + (spread > 0 ? this.deps.random() * spread : 0);
  }

  /** One signed attempt of an arbitrary body (tests replaying their own crafts). */
  async deliverRaw(body: string, url: string): Promise<{ status: number | null; error: string | null }> {
    let eventId: string | null = null;
    let eventType: string | null = null;
    let attempt = 1;
    try {
      const parsed = JSON.parse(body) as {
        data?: { id?: unknown; event_type?: unknown };
        meta?: { attempt?: unknown };
      };
      eventId = typeof parsed.data?.id === 'string' ? parsed.data.id : null;
      eventType = typeof parsed.data?.event_type === 'string' ? parsed.data.event_type : null;
      attempt = typeof parsed.meta?.attempt === 'number' ? parsed.meta.attempt : 1;
    } catch {
      // not JSON: sent as is, recorded without an id
    }
    const { scheduler } = this.deps;
    const answer = await scheduler.track(this.post(url, body, scheduler.signal));
    this.counts.attempts++;
    const at = new Date(scheduler.wallNow()).toISOString();
    this.deps.record({ at, eventId, eventType, copy: 'manual', attempt, url, ...answer, body });
    return answer;
  }

  /** reset(): pending lanes belong to forgotten resources. */
  forget(): void {
    this.lanes = new Map();
    this.counts = emptyWebhookCounts();
  }

  private holdBack(b: Behaviour): number {
    return b.reorderWindowMs > 0 ? this.deps.random() * b.reorderWindowMs : 0;
  }

  private launch(
    event: TelnyxEvent,
    urls: string[],
    copy: DeliveryCopy,
    delayMs: number,
    signal: AbortSignal,
  ): Promise<void> {
    const { scheduler } = this.deps;
    return new Promise((firstAnswered) => {
      if (signal.aborted) firstAnswered();
      else if (delayMs <= 0) void scheduler.track(this.deliver(event, urls, copy, firstAnswered, signal));
      else scheduler.afterReal(delayMs, () => this.deliver(event, urls, copy, firstAnswered, signal));
    });
  }

  private async deliver(
    event: TelnyxEvent,
    urls: string[],
    copy: DeliveryCopy,
    firstAnswered: () => void,
    signal: AbortSignal,
  ) {
    const { scheduler, log } = this.deps;
    let attempt = 0;
    try {
      for (const url of urls) {
        for (let i = 0; i < ATTEMPTS_PER_URL; i++) {
          attempt++;
          const body = envelopeBody(event, attempt, url);
          const answer = await this.post(url, body, signal);
          if (signal.aborted) return;
          this.counts.attempts++;
          this.deps.record({
            at: new Date(scheduler.wallNow()).toISOString(),
            eventId: event.id,
            eventType: event.eventType,
            copy,
            attempt,
            url,
            ...answer,
            body,
          });
          firstAnswered();
          if (answer.status !== null && answer.status >= 200 && answer.status < 300) return;
          const why = answer.status !== null ? String(answer.status) : (answer.error ?? 'no answer');
          this.counts.failedAttempts[why] = (this.counts.failedAttempts[why] ?? 0) + 1;
          const backoff = RETRY_BACKOFF_MS[i];
          if (i < ATTEMPTS_PER_URL - 1 && backoff !== undefined) await scheduler.sleepReal(backoff, signal);
        }
      }
      this.counts.failedDeliveries++;
      log.warn({ eventId: event.id, eventType: event.eventType, attempts: attempt }, 'simulator webhook not delivered');
    } catch (err) {
      if (!signal.aborted) throw err;
    } finally {
      firstAnswered();
    }
  }

  private async post(
    url: string,
    body: string,
    signal: AbortSignal,
  ): Promise<{ status: number | null; error: string | null }> {
    const { privateKey, scheduler } = this.deps;
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'telnyx-webhooks',
      ...signTelnyxWebhook(privateKey, Math.floor(scheduler.wallNow() / 1000), body),
    };
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers,
        body,
        redirect: 'manual',
        signal: AbortSignal.any([signal, AbortSignal.timeout(ANSWER_TIMEOUT_MS)]),
      });
      await res.arrayBuffer().catch(() => undefined);
      return { status: res.status, error: null };
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } };
      if (e.name === 'TimeoutError') return { status: null, error: `no answer within ${ANSWER_TIMEOUT_MS} ms` };
      return { status: null, error: e.cause?.code ?? e.cause?.message ?? e.message };
    }
  }
}
