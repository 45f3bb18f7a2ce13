// The API's request limits, counted in this process before any work: per client
// address before authentication (a flood of made-up keys costs no lookups beyond
// it), per API key right after it (a key past its limit that this process has seen
// is answered 429 from memory: no database round trip either). Each process
// counts only what reaches it and allows 1/replicas of each limit, so N replicas
// behind a balancer never allow N × the limit together (config.apiReplicas).
//
// Fixed one-second windows: one map of counts per window, dropped whole when the
// second turns, so memory is bounded by the distinct clients of one second.

import { isIPv4 } from 'node:net';

/** What one process allows of a limit shared by `replicas` processes (at least 1). */
export const perReplica = (limit: number, replicas: number) => Math.max(1, Math.floor(limit / replicas));

export class WindowCounter {
  private window = Number.NaN;
  private counts = new Map<string, number>();

  constructor(
    readonly max: number,
    private readonly windowMs = 1_000,
  ) {}

  /** Counts one request of `key` at `now`: null when it is within the limit, else ms until the window ends. */
  hit(key: string, now = Date.now()): number | null {
    const window = Math.floor(now / this.windowMs);
    if (window !== this.window) {
      this.window = window;
      this.counts = new Map();
    }
    const n = (this.counts.get(key) ?? 0) + 1;
    this.counts.set(key, n);
    return n > this.max ? (window + 1) * this.windowMs - now : null;
  }
}

/**
 * The client an address stands for: an IPv4 address itself (also written as
 * IPv4-mapped IPv6), an IPv6 address by its /64 — one subscriber's usual share,
 * which holds more addresses than anyone could count one by one.
 */
export function clientOf(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (isIPv4(address) || !address.includes(':')) return address;
  const [head = '', tail = ''] = address.split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = address.includes('::')
    ? [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right]
    : left;
  return `${groups
    .slice(0, 4)
    .map((g) => g.toLowerCase().replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

/** Whole seconds to wait, for Retry-After. */
export const retryAfterSeconds = (ms: number) => String(Math.max(1, Math.ceil(ms / 1000)));
