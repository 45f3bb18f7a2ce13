// A customer's webhook receiver on loopback (svix's TestReceiver): records every
// request, verifies it with the independent `standardwebhooks` package against
// the secrets it is told about, and answers whatever the test scripts.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
  /** For each secret the receiver holds: did the request verify with it? */
  verifiedWith: boolean[];
  at: number;
}

export type Answer = { status: number; headers?: Record<string, string>; hang?: boolean; body?: string | Buffer };

export interface Receiver {
  url: string;
  received: Received[];
  secrets: string[];
  /** Decides the answer to the n-th request (0-based). Default: 200. */
  answer: (n: number, req: Received) => Answer | Promise<Answer>;
  /** Events that verified with at least one secret, parsed. */
  events(): { id: string; type: string; data: Record<string, unknown> }[];
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const hanging = new Set<http.ServerResponse>();
  const receiver: Receiver = {
    url: '',
    received: [],
    secrets: [],
    answer: () => ({ status: 200 }),
    events() {
      return this.received
        .filter((r) => r.verifiedWith.some(Boolean))
        .map((r) => JSON.parse(r.body) as { id: string; type: string; data: Record<string, unknown> });
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
      const entry: Received = {
        headers: req.headers,
        body,
        at: Date.now(),
        verifiedWith: receiver.secrets.map((secret) => {
          try {
            new Webhook(secret).verify(body, headers);
            return true;
          } catch {
            return false;
          }
        }),
      };
      const n = receiver.received.push(entry) - 1;
      const a = await receiver.answer(n, entry);
      if (a.hang) {
        hanging.add(res);
        return;
      }
      res.writeHead(a.status, { 'content-type': 'text/plain', ...a.headers });
      res.end(a.body ?? `answer ${a.status}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  return receiver;
}
