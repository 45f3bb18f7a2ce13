// A webhook receiver for simulator tests: a bare node:http server that keeps the
// raw bytes and headers of every delivery and answers with the status the test
// chooses (200 by default), like svix's TestReceiver.

import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Envelope {
  data: { event_type: string; id: string; occurred_at: string; payload: Record<string, unknown>; record_type: string };
  meta: { attempt: number; delivered_to: string };
}

export interface Received {
  raw: string;
  headers: IncomingHttpHeaders;
  json: Envelope;
  status: number;
}

export type Answer = (delivery: Omit<Received, 'status'>, index: number) => number | Promise<number>;

export interface Receiver {
  url: string;
  received: Received[];
  /** Deliveries of one event type, in arrival order. */
  ofType(eventType: string): Received[];
  close(): Promise<void>;
}

export async function startReceiver(answer: Answer = () => 200): Promise<Receiver> {
  const received: Received[] = [];
  let index = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const delivery = { raw, headers: req.headers, json: JSON.parse(raw) as Envelope };
      void Promise.resolve(answer(delivery, index++)).then((status) => {
        received.push({ ...delivery, status });
        res.writeHead(status, { 'content-type': 'application/json' }).end('{}');
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/webhooks/telnyx`,
    received,
    ofType: (t) => received.filter((r) => r.json.data.event_type === t),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Authorised JSON requests against the simulator's REST API. */
export async function telnyx(sim: { url: string; apiKey: string }, method: string, path: string, body?: unknown) {
  const res = await fetch(`${sim.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${sim.apiKey}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: (text ? JSON.parse(text) : null) as any };
}
