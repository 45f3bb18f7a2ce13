// Sends the simulated Twilio's webhooks the way Twilio does: a form POST signed
// with X-Twilio-Signature (HMAC-SHA1 of the URL it calls and the sorted
// parameters, keyed by the auth token), no event id, no timestamp. A failed
// attempt (no answer within 15 s, or not a 2xx) is tried once more a second
// later (Twilio's default retry count of 1), then given up.
//
// Twilio promises neither order nor single delivery, and the behaviour knobs
// (behaviour.ts) make it say so: a callback sent twice (duplicateRate), held
// back at random so later ones overtake it (reorderWindowMs), held far back
// (holdRate, late), or never sent (dropRate; a persona's `lose`). Without them
// one message's callbacks go out in order, each after the previous one's first
// answer.

import type { Logger } from 'pino';
import { twilioSignature } from '../../carrier/twilio/signature.js';
import type { Behaviour } from '../behaviour.js';
import type { Scheduler } from '../scheduler.js';

/** Twilio's answer deadline (15 s in total by default); real time. */
export const CALLBACK_TIMEOUT_MS = 15_000;
const RETRY_AFTER_MS = 1_000;
const ATTEMPTS = 2;

export interface CallbackAttempt {
  seq: number;
  at: string;
  url: string;
  /** MessageStatus of a status callback, `received` for an inbound message. */
  status: string;
  sid: string;
  copy: 'original' | 'duplicate';
  attempt: number;
  answer: number | null;
  error: string | null;
}

export interface CallbackCounts {
  callbacks: number;
  attempts: number;
  duplicates: number;
  held: number;
  dropped: number;
  failed: number;
}

export const emptyCallbackCounts = (): CallbackCounts => ({
  callbacks: 0,
  attempts: 0,
  duplicates: 0,
  held: 0,
  dropped: 0,
  failed: 0,
});

export interface CallbackSenderDeps {
  authToken: string;
  scheduler: Scheduler;
  random: () => number;
  behaviour: () => Behaviour;
  record: (a: Omit<CallbackAttempt, 'seq'>) => void;
  log: Logger;
}

export class CallbackSender {
  counts = emptyCallbackCounts();
  private lanes = new Map<string, Promise<void>>();

  constructor(private readonly deps: CallbackSenderDeps) {}

  /**
   * Posts `params` to `url` with whatever rumours apply; `lose`/`holdMs` are the
   * persona's say. Resolves once the first attempt was answered (a callback fired
   * before the create is answered waits on exactly that), at once when held or lost.
   */
  send(
    url: string,
    params: [string, string][],
    o: { lane: string; lose?: boolean; holdMs?: number | null; early?: boolean },
  ): Promise<void> {
    const b = this.deps.behaviour();
    this.counts.callbacks++;
    if (o.lose || (b.dropRate > 0 && this.deps.random() < b.dropRate)) {
      this.counts.dropped++;
      return Promise.resolve();
    }
    const signal = this.deps.scheduler.signal;
    let held: number | null = o.holdMs ?? null;
    if (held === null && b.holdRate > 0 && this.deps.random() < b.holdRate) {
      held = b.holdMinMs + this.deps.random() * Math.max(0, b.holdMaxMs - b.holdMinMs);
    }
    const reorder = () => (b.reorderWindowMs > 0 ? this.deps.random() * b.reorderWindowMs : 0);
    let first: Promise<void>;
    if (held !== null) {
      this.counts.held++;
      void this.launch(url, params, 'original', held, signal);
      first = Promise.resolve();
    } else if (b.reorderWindowMs === 0 && !o.early) {
      const previous = this.lanes.get(o.lane);
      first = previous
        ? previous.then(() => this.launch(url, params, 'original', 0, signal))
        : this.launch(url, params, 'original', 0, signal);
      this.lanes.set(o.lane, first);
      void first.then(() => {
        if (this.lanes.get(o.lane) === first) this.lanes.delete(o.lane);
      });
    } else {
      first = this.launch(url, params, 'original', o.early ? 0 : reorder(), signal);
    }
    if (this.deps.random() < b.duplicateRate) {
      this.counts.duplicates++;
      void this.launch(url, params, 'duplicate', (held ?? 0) + reorder(), signal);
    }
    return first;
  }

  forget(): void {
    this.lanes = new Map();
    this.counts = emptyCallbackCounts();
  }

  private launch(
    url: string,
    params: [string, string][],
    copy: CallbackAttempt['copy'],
    delayMs: number,
    signal: AbortSignal,
  ): Promise<void> {
    const { scheduler } = this.deps;
    return new Promise((firstAnswered) => {
      if (signal.aborted) firstAnswered();
      else if (delayMs <= 0) void scheduler.track(this.deliver(url, params, copy, firstAnswered, signal));
      else scheduler.afterReal(delayMs, () => this.deliver(url, params, copy, firstAnswered, signal));
    });
  }

  private async deliver(
    url: string,
    params: [string, string][],
    copy: CallbackAttempt['copy'],
    firstAnswered: () => void,
    signal: AbortSignal,
  ): Promise<void> {
    const { scheduler } = this.deps;
    const p = new Map(params);
    try {
      for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
        const { answer, error } = await this.post(url, params, signal);
        if (signal.aborted) return;
        this.counts.attempts++;
        this.deps.record({
          at: new Date(scheduler.wallNow()).toISOString(),
          url,
          status: p.get('MessageStatus') ?? p.get('SmsStatus') ?? '',
          sid: p.get('MessageSid') ?? '',
          copy,
          attempt,
          answer,
          error,
        });
        firstAnswered();
        if (answer !== null && answer >= 200 && answer < 300) return;
        if (attempt < ATTEMPTS) await scheduler.sleepReal(RETRY_AFTER_MS, signal);
      }
      this.counts.failed++;
    } catch (err) {
      if (!signal.aborted) throw err;
    } finally {
      firstAnswered();
    }
  }

  private async post(
    url: string,
    params: [string, string][],
    signal: AbortSignal,
  ): Promise<{ answer: number | null; error: string | null }> {
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          'user-agent': 'TwilioProxy/1.1',
          'x-twilio-signature': twilioSignature(this.deps.authToken, url, params),
        },
        body: new URLSearchParams(params).toString(),
        redirect: 'manual',
        signal: AbortSignal.any([signal, AbortSignal.timeout(CALLBACK_TIMEOUT_MS)]),
      });
      await res.arrayBuffer().catch(() => undefined);
      return { answer: res.status, error: null };
    } catch (err) {
      const e = err as Error & { cause?: { code?: string } };
      return { answer: null, error: e.cause?.code ?? e.message };
    }
  }
}
