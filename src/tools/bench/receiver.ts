// The customer's webhook endpoint on loopback: verifies every request with the
// independent `standardwebhooks` package (as a customer would), answers 200, and
// notes when each verified event arrived. A request that does not verify is
// counted, never treated as delivered.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Arrival {
  eventId: string;
  type: string;
  /** data.id: the message (or other resource) the event is about. */
  subjectId: string;
  /** performance.now() when the request had fully arrived and verified. */
  at: number;
}

export interface Receiver {
  url: string;
  /** Verified events, in arrival order, since the last reset(). */
  arrivals: Arrival[];
  rejected: number;
  /** Called for each verified event as it arrives. */
  onArrival: ((a: Arrival) => void) | null;
  /** Resolves once `n` verified events have arrived since the last reset(). */
  waitFor(n: number, timeoutMs: number): Promise<void>;
  reset(): void;
  close(): Promise<void>;
}

export async function startReceiver(secret: () => string): Promise<Receiver> {
  let verifier: { secret: string; webhook: Webhook } | null = null;
  let waiter: { n: number; resolve: () => void } | null = null;
  const receiver: Receiver = {
    url: '',
    arrivals: [],
    rejected: 0,
    onArrival: null,
    waitFor(n, timeoutMs) {
      if (receiver.arrivals.length >= n) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiter = null;
          reject(
            new Error(`only ${receiver.arrivals.length} of ${n} customer webhooks arrived within ${timeoutMs} ms`),
          );
        }, timeoutMs);
        waiter = {
          n,
          resolve: () => {
            clearTimeout(timer);
            waiter = null;
            resolve();
          },
        };
      });
    },
    reset() {
      receiver.arrivals = [];
      receiver.rejected = 0;
      receiver.onArrival = null;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };

  const server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const s = secret();
      if (verifier?.secret !== s) verifier = { secret: s, webhook: new Webhook(s) };
      try {
        const event = verifier.webhook.verify(body, {
          'webhook-id': String(req.headers['webhook-id']),
          'webhook-timestamp': String(req.headers['webhook-timestamp']),
          'webhook-signature': String(req.headers['webhook-signature']),
        }) as { id: string; type: string; data: { id: string } };
        const arrival = { eventId: event.id, type: event.type, subjectId: event.data.id, at: performance.now() };
        receiver.arrivals.push(arrival);
        receiver.onArrival?.(arrival);
        if (waiter && receiver.arrivals.length >= waiter.n) waiter.resolve();
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      } catch {
        receiver.rejected++;
        res.writeHead(400, { 'content-type': 'text/plain' }).end('signature did not verify');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  return receiver;
}
