// One HTTP attempt of a customer webhook: POST, no redirects followed (3xx is a
// failure), a hard deadline for the whole exchange, the connect-time address
// guard, and at most a short excerpt of the response kept for the delivery log.

import { isIP } from 'node:net';
import { Agent, request } from 'undici';
import { guardedLookup, isBlockedAddress, isBlockedPort } from './ssrf.js';

export interface AttemptResult {
  status: number | null;
  retryAfter: string | null;
  excerpt: string | null;
  error: string | null;
  /** No answer within the deadline (the circuit breaker's signal: a slot held for nothing). */
  timedOut: boolean;
  durationMs: number;
}

const EXCERPT_BYTES = 1024;
const MAX_DRAIN_BYTES = 64 * 1024;

// undici keeps a pool of keep-alive connections per origin (each endpoint's
// scheme, host and port), so a busy endpoint is not dialed (and, over TLS,
// handshaken) again for every event. Every new connection still resolves its
// host through guardedLookup: the address checked is the address dialed, and a
// kept connection is one that was checked when it was made. An attempt that runs
// out of time destroys its connection, so a hanging receiver keeps none.

// undici's own timeouts tick at about a second's resolution; the backstop waits
// that long past them so that it does not win the race for an ordinary hang.
const BACKSTOP_GRACE_MS = 1_000;
const TIMEOUTS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);
const agentOptions = { keepAliveTimeout: 30_000, keepAliveMaxTimeout: 60_000, pipelining: 1 };
const agents = {
  guarded: new Agent({ ...agentOptions, connect: { lookup: guardedLookup } }),
  open: new Agent(agentOptions),
};

export function sendWebhook(
  target: string,
  headers: Record<string, string>,
  body: string,
  opts: { timeoutMs: number; allowPrivate: boolean },
): Promise<AttemptResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  return new Promise((resolve) => {
    let settled = false;
    let deadline: NodeJS.Timeout | undefined;
    let timedOut = false;
    const done = (r: Omit<AttemptResult, 'durationMs' | 'timedOut'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      resolve({ ...r, timedOut: timedOut && r.status === null, durationMs: elapsed() });
    };
    let url: URL;
    try {
      url = new URL(target);
    } catch {
      return done({ status: null, retryAfter: null, excerpt: null, error: 'invalid url' });
    }
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (isBlockedPort(url)) return done({ status: null, retryAfter: null, excerpt: null, error: 'blocked port' });
    if (!opts.allowPrivate && isIP(host) && isBlockedAddress(host)) {
      return done({ status: null, retryAfter: null, excerpt: null, error: 'blocked address' });
    }
    // The receiver's silence ends the attempt through undici's own timeouts, which
    // close the connection and nothing else; the abort is the backstop for the
    // whole exchange (a slow connect, a dribbling body). Aborting a request in
    // flight makes undici dial the origin again at once, for nothing, so it is kept
    // for the cases the timeouts do not cover.
    const controller = new AbortController();
    deadline = setTimeout(() => {
      timedOut = true;
      controller.abort(new Error(`timed out after ${opts.timeoutMs} ms`));
    }, opts.timeoutMs + BACKSTOP_GRACE_MS);
    const failed = (err: Error & { code?: string }) => {
      const cause = err.cause as (Error & { code?: string }) | undefined;
      const code = err.code ?? cause?.code;
      if (code === 'EBLOCKEDADDRESS' || cause?.code === 'EBLOCKEDADDRESS') return 'blocked address';
      if (code && TIMEOUTS.has(code)) timedOut = true;
      if (timedOut) return `timed out after ${opts.timeoutMs} ms`;
      return cause?.message || err.message || code || 'request failed';
    };
    request(url, {
      dispatcher: opts.allowPrivate ? agents.open : agents.guarded,
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json', 'user-agent': 'Handset-Webhooks/1.0' },
      body: Buffer.from(body, 'utf8'),
      signal: controller.signal,
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
    }).then(
      async (res) => {
        const chunks: Buffer[] = [];
        let kept = 0;
        let seen = 0;
        try {
          for await (const chunk of res.body as AsyncIterable<Buffer>) {
            seen += chunk.length;
            if (kept < EXCERPT_BYTES) {
              chunks.push(chunk.subarray(0, EXCERPT_BYTES - kept));
              kept += Math.min(chunk.length, EXCERPT_BYTES - kept);
            }
            if (seen > MAX_DRAIN_BYTES) break; // not worth keeping the connection for: leaving destroys it
          }
        } catch {
          // The answer's status stands; its body was cut off (the deadline, the receiver gone).
        }
        const retryAfter = res.headers['retry-after'];
        // On the next turn: by then undici has put the connection back in its pool,
        // so an attempt the caller starts at once reuses it instead of dialing.
        await new Promise((next) => setImmediate(next));
        done({
          status: res.statusCode,
          retryAfter: typeof retryAfter === 'string' ? retryAfter : null,
          // Whatever bytes the receiver sent: text columns cannot hold NUL (gzip, UTF-16, binary bodies have it).
          excerpt: Buffer.concat(chunks).toString('utf8').replaceAll('\u0000', '\ufffd') || null,
          error: null,
        });
      },
      (err: Error) => done({ status: null, retryAfter: null, excerpt: null, error: failed(err) }),
    );
  });
}
