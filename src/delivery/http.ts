// One HTTP attempt of a customer webhook: POST, no redirects followed (3xx is a
// failure), a hard deadline for the whole exchange, the connect-time address
// guard, and at most a short excerpt of the response kept for the delivery log.
//
// Connections are undici's: one keep-alive pool per endpoint origin, so a busy
// endpoint's attempts reuse their sockets and one origin's connections never
// wait behind another's. How many attempts an endpoint has in flight is the
// delivery capacity's to decide (capacity.ts), not the pool's. The guarded pools
// resolve names through the address guard on every new connection, and a pool
// kept alive for a dev (allow-private) dial is never one a guarded attempt uses.

import { isIP } from 'node:net';
import { Agent, type Dispatcher, request } from 'undici';
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

const dispatchers: Record<'guarded' | 'open', Dispatcher> = {
  guarded: new Agent({ connect: { lookup: guardedLookup } }),
  open: new Agent(),
};

export async function sendWebhook(
  target: string,
  headers: Record<string, string>,
  body: string,
  opts: { timeoutMs: number; allowPrivate: boolean },
): Promise<AttemptResult> {
  const started = performance.now();
  const failed = (error: string, timedOut = false): AttemptResult => ({
    status: null,
    retryAfter: null,
    excerpt: null,
    error,
    timedOut,
    durationMs: Math.round(performance.now() - started),
  });
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return failed('invalid url');
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isBlockedPort(url)) return failed('blocked port');
  if (!opts.allowPrivate && isIP(host) && isBlockedAddress(host)) return failed('blocked address');

  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(), opts.timeoutMs);
  try {
    const payload = Buffer.from(body, 'utf8');
    const res = await request(url, {
      method: 'POST',
      dispatcher: dispatchers[opts.allowPrivate ? 'open' : 'guarded'],
      signal: deadline.signal,
      headers: {
        ...headers,
        'content-type': 'application/json',
        'content-length': String(payload.length),
        'user-agent': 'Handset-Webhooks/1.0',
      },
      body: payload,
    });
    const chunks: Buffer[] = [];
    let kept = 0;
    let seen = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      seen += chunk.length;
      if (kept < EXCERPT_BYTES) {
        chunks.push(chunk.subarray(0, EXCERPT_BYTES - kept));
        kept += Math.min(chunk.length, EXCERPT_BYTES - kept);
      }
      if (seen > MAX_DRAIN_BYTES) {
        res.body.destroy(); // not worth keeping the connection for
        break;
      }
    }
    const retryAfter = res.headers['retry-after'];
    return {
      status: res.statusCode,
      retryAfter: typeof retryAfter === 'string' ? retryAfter : null,
      // Whatever bytes the receiver sent: text columns cannot hold NUL (gzip, UTF-16, binary bodies have it).
      excerpt: Buffer.concat(chunks).toString('utf8').replaceAll('\u0000', '\ufffd') || null,
      error: null,
      timedOut: false,
      durationMs: Math.round(performance.now() - started),
    };
  } catch (err) {
    if (deadline.signal.aborted) return failed(`timed out after ${opts.timeoutMs} ms`, true);
    return failed(describe(err as Error & { code?: string; cause?: unknown }));
  } finally {
    clearTimeout(timer);
  }
}

/** What the delivery log says of a request that got no answer. */
function describe(err: Error & { code?: string; cause?: unknown }): string {
  const cause = err.cause as (Error & { code?: string }) | undefined;
  if (err.code === 'EBLOCKEDADDRESS' || cause?.code === 'EBLOCKEDADDRESS') return 'blocked address';
  return err.message || err.code || 'request failed';
}
