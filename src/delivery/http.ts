// One HTTP attempt of a customer webhook: POST, no redirects followed (3xx is a
// failure), a hard deadline for the whole exchange, the connect-time address
// guard, and at most a short excerpt of the response kept for the delivery log.

import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
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

const agents = {
  guarded: {
    'http:': new http.Agent({ keepAlive: true, lookup: guardedLookup }),
    'https:': new https.Agent({ keepAlive: true, lookup: guardedLookup }),
  },
  open: {
    'http:': new http.Agent({ keepAlive: true }),
    'https:': new https.Agent({ keepAlive: true }),
  },
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
    const protocol = url.protocol === 'https:' ? 'https:' : 'http:';
    const transport = protocol === 'https:' ? https : http;
    const payload = Buffer.from(body, 'utf8');
    const req = transport.request(url, {
      method: 'POST',
      agent: (opts.allowPrivate ? agents.open : agents.guarded)[protocol],
      headers: {
        ...headers,
        'content-type': 'application/json',
        'content-length': String(payload.length),
        'user-agent': 'Handset-Webhooks/1.0',
      },
    });
    deadline = setTimeout(() => {
      timedOut = true;
      req.destroy(new Error(`timed out after ${opts.timeoutMs} ms`));
    }, opts.timeoutMs);
    req.on('error', (err: Error & { code?: string }) => {
      const error = err.code === 'EBLOCKEDADDRESS' ? 'blocked address' : err.message || err.code || 'request failed';
      done({ status: null, retryAfter: null, excerpt: null, error });
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let kept = 0;
      let seen = 0;
      res.on('data', (chunk: Buffer) => {
        seen += chunk.length;
        if (kept < EXCERPT_BYTES) {
          chunks.push(chunk.subarray(0, EXCERPT_BYTES - kept));
          kept += Math.min(chunk.length, EXCERPT_BYTES - kept);
        }
        if (seen > MAX_DRAIN_BYTES) res.destroy(); // not worth keeping the connection for
      });
      const finish = () =>
        done({
          status: res.statusCode ?? null,
          retryAfter: typeof res.headers['retry-after'] === 'string' ? res.headers['retry-after'] : null,
          // Whatever bytes the receiver sent: text columns cannot hold NUL (gzip, UTF-16, binary bodies have it).
          excerpt: Buffer.concat(chunks).toString('utf8').replaceAll('\u0000', '\ufffd') || null,
          error: null,
        });
      res.on('end', finish);
      res.on('close', finish);
      res.on('error', finish);
    });
    req.end(payload);
  });
}
