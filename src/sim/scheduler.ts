// The simulated carrier's clock and timers. Every carrier delay (ring, talk,
// receipt) is simulated time and is multiplied by timeScale before
// it becomes a real timer, so tests and chaos runs compress time instead of
// sleeping. Every timer and every in-flight delivery is counted, so idle() can say
// when the carrier has nothing left to do, and reset()/close() cancel them all.
//
// Simulated time also dates the webhooks. Each resource (a message, a call leg)
// has its own timeline: it starts at the wall clock when the resource is created
// and runs 1/timeScale as fast, so a 3 s talk compressed to 3 ms still reports a
// 3 s call (end_time − start_time), which is what billing downstream must see,
// while no timestamp runs ahead of the wall clock by more than its resource's own
// simulated lifetime. Events a persona plans are stamped at their planned time
// (timer jitter does not stretch a 5 s call); events from outside (a command, the
// control API) at the timeline's now. With timeScale 1 a timeline is the wall clock.

import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';

export interface Timer {
  cancel(): void;
}

export class Scheduler {
  private timers = new Set<NodeJS.Timeout>();
  private pending = 0;
  private waiters: Array<() => void> = [];
  private abort = unboundedController();

  constructor(
    readonly timeScale: number,
    /** The wall clock, ms since the epoch. A parameter so tests can move time. */
    readonly wallNow: () => number,
    private readonly log: Logger,
  ) {}

  /**
   * A resource's simulated clock, starting now: ms since the epoch, fractional
   * (the fraction gives voice timestamps their microseconds).
   */
  timeline(): () => number {
    const start = this.wallNow();
    return () => start + (this.wallNow() - start) / this.timeScale;
  }

  /** Aborted by reset() and close(): in-flight deliveries and sleeps stop. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Runs fn after `simulatedMs` of simulated time. */
  after(simulatedMs: number, fn: () => unknown): Timer {
    return this.afterReal(simulatedMs * this.timeScale, fn);
  }

  /** Runs fn after `ms` of real time (the knobs are real milliseconds). */
  afterReal(ms: number, fn: () => unknown): Timer {
    this.pending++;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      this.settle();
    };
    const handle = setTimeout(
      () => {
        // Fired: from here on it is running work, which reset() stops through the signal.
        this.timers.delete(handle);
        let result: unknown;
        try {
          result = fn();
        } catch (err) {
          this.log.error({ err }, 'simulator timer failed');
        }
        if (result instanceof Promise) {
          result.catch((err: unknown) => this.log.error({ err }, 'simulator task failed')).finally(finish);
        } else finish();
      },
      Math.max(0, ms),
    );
    this.timers.add(handle);
    return {
      cancel: () => {
        if (done || !this.timers.has(handle)) return;
        clearTimeout(handle);
        this.timers.delete(handle);
        finish();
      },
    };
  }

  /** Counts a promise as pending work until it settles. */
  track<T>(promise: Promise<T>): Promise<T> {
    this.pending++;
    return promise.finally(() => this.settle());
  }

  /** Sleeps `simulatedMs` of simulated time; rejects when the signal (by default reset()) aborts. */
  sleep(simulatedMs: number, signal: AbortSignal = this.abort.signal): Promise<void> {
    return this.sleepReal(simulatedMs * this.timeScale, signal);
  }

  /** Sleeps `ms` of real time; rejects when the signal (by default reset()) aborts. */
  sleepReal(ms: number, signal: AbortSignal = this.abort.signal): Promise<void> {
    return sleep(Math.max(0, ms), undefined, { signal });
  }

  /** Resolves when no timer is armed and nothing is in flight. */
  idle(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Cancels every timer and aborts every in-flight delivery. */
  cancelAll(): void {
    for (const handle of this.timers) clearTimeout(handle);
    this.pending -= this.timers.size;
    this.timers.clear();
    this.abort.abort();
    this.abort = unboundedController();
    this.settle(0);
  }

  private settle(by = 1): void {
    this.pending -= by;
    if (this.pending > 0) return;
    // Let work that a settling task scheduled in its last microtasks register first.
    setImmediate(() => {
      if (this.pending > 0) return;
      const waiters = this.waiters;
      this.waiters = [];
      for (const w of waiters) w();
    });
  }
}

// Every in-flight delivery and sleep listens on the one signal; a storm has
// hundreds at once, which is expected, not a leak.
function unboundedController(): AbortController {
  const c = new AbortController();
  setMaxListeners(0, c.signal);
  return c;
}
