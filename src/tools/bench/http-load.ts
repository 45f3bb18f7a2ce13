// The two ways the bench loads an HTTP server with pre-signed webhooks.
//
// `hammer` is closed-loop and as cheap per request as a Node client gets
// (autocannon: raw sockets, keep-alive, N connections each with one request in
// flight); it finds the peak. Latency is taken from autocannon's per-response
// timings, every sample kept.
//
// `drive` sends a given list of requests either as fast as `concurrency` allows
// or open-loop at a fixed rate (uniform arrivals, so a rate limit does not turn
// into once-a-second bursts as autocannon's does), and reports each response to
// the caller with its body and the moment it ended: the pipeline needs to know
// when each receipt was acknowledged. It runs on WebhookClient, a lean raw-socket
// client, so an open-loop generator costs the shared CPU little more than
// autocannon does.

import net from 'node:net';
import autocannon from 'autocannon';
import { Latencies, type LatencySummary } from './stats.js';
import type { SignedWebhook } from './webhooks.js';

export const WEBHOOK_PATH = '/webhooks/telnyx';

export interface LoadResult {
  /** Responses received while measuring. */
  requests: number;
  seconds: number;
  /** Responses per second. */
  rate: number;
  statuses: Record<string, number>;
  /** Socket errors and timeouts. */
  errors: number;
  latency: LatencySummary;
  /** The pre-signed requests ran out before the time was up (the run ended early). */
  exhausted: boolean;
}

export interface HammerOptions {
  /** Ingest base URLs; connections are spread over them round-robin. */
  urls: string[];
  connections: number;
  seconds: number;
  /** Consumed in order; `used` says how many were sent. */
  webhooks: SignedWebhook[];
  from?: number;
}

export async function hammer(opts: HammerOptions): Promise<LoadResult & { used: number }> {
  const latencies = new Latencies();
  const statuses: Record<string, number> = {};
  let next = opts.from ?? 0;
  let exhausted = false;
  let instance: autocannon.Instance | undefined;
  const last = opts.webhooks[opts.webhooks.length - 1]!;

  const started = performance.now();
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon(
      {
        url: opts.urls.map((u) => u + WEBHOOK_PATH) as unknown as string, // autocannon accepts a list
        connections: opts.connections,
        duration: opts.seconds,
        pipelining: 1,
        timeout: 10,
        requests: [
          {
            method: 'POST',
            path: WEBHOOK_PATH,
            setupRequest: (req) => {
              let w = opts.webhooks[next++];
              if (!w) {
                exhausted = true;
                instance?.stop();
                w = last; // sent as a duplicate until autocannon's next tick stops it
              }
              return { ...req, body: w.body, headers: w.headers };
            },
          },
        ],
      },
      (err, res) => (err ? reject(err as Error) : resolve(res)),
    );
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      latencies.record(responseTime);
      statuses[statusCode] = (statuses[statusCode] ?? 0) + 1;
    });
  });
  const seconds = (performance.now() - started) / 1000;
  const requests = latencies.count;
  return {
    requests,
    seconds,
    rate: requests / seconds,
    statuses,
    errors: result.errors + result.timeouts,
    latency: latencies.summary(),
    exhausted,
    used: next - (opts.from ?? 0),
  };
}

export type PostResult =
  | { status: number; body: string; endedAt: number; ms: number }
  | { status: null; error: string; endedAt: number; ms: number };

interface Pending {
  begun: number;
  resolve: (r: PostResult) => void;
}

/**
 * A minimal keep-alive HTTP/1.1 client for webhook POSTs: raw sockets, the
 * request written in one piece, responses read by Content-Length. It costs a
 * fraction of node:http's CPU per request, which matters when the load
 * generator shares two cores with the server it measures.
 */
export class WebhookClient {
  private readonly idle: net.Socket[] = [];
  private readonly waiting: { w: SignedWebhook; p: Pending }[] = [];
  private readonly pending = new Map<net.Socket, Pending>();
  private open = 0;
  private readonly host: string;
  private readonly port: number;
  private readonly head: string;

  constructor(
    url: string,
    private readonly maxSockets: number,
  ) {
    const target = new URL(url + WEBHOOK_PATH);
    this.host = target.hostname;
    this.port = Number(target.port);
    this.head = `POST ${target.pathname} HTTP/1.1\r\nHost: ${target.host}\r\n`;
  }

  post(w: SignedWebhook): Promise<PostResult> {
    return new Promise((resolve) => {
      const p = { begun: performance.now(), resolve };
      const socket = this.idle.pop();
      if (socket) this.send(socket, w, p);
      else if (this.open < this.maxSockets) this.connect(w, p);
      else this.waiting.push({ w, p });
    });
  }

  close(): void {
    for (const s of this.idle) s.destroy();
    for (const s of this.pending.keys()) s.destroy();
  }

  private connect(w: SignedWebhook, p: Pending): void {
    this.open++;
    const socket = net.connect({ host: this.host, port: this.port, noDelay: true });
    let buf: Buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.toString('latin1', 0, end);
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      const body = buf.toString('utf8', end + 4, end + 4 + length);
      buf = buf.subarray(end + 4 + length);
      const done = this.pending.get(socket);
      this.pending.delete(socket);
      const endedAt = performance.now();
      done?.resolve({ status: Number(head.slice(9, 12)), body, endedAt, ms: endedAt - done.begun });
      const next = this.waiting.shift();
      if (next) this.send(socket, next.w, next.p);
      else this.idle.push(socket);
    });
    let closed = false;
    const fail = (err?: Error) => {
      if (closed) return;
      closed = true;
      this.open--;
      const i = this.idle.indexOf(socket);
      if (i >= 0) this.idle.splice(i, 1);
      const done = this.pending.get(socket);
      this.pending.delete(socket);
      if (done) {
        const endedAt = performance.now();
        done.resolve({ status: null, error: err?.message ?? 'connection closed', endedAt, ms: endedAt - done.begun });
      }
      const next = this.waiting.shift();
      if (next) this.connect(next.w, next.p);
    };
    socket.on('error', fail);
    socket.on('close', () => fail());
    this.send(socket, w, p);
  }

  private send(socket: net.Socket, w: SignedWebhook, p: Pending): void {
    this.pending.set(socket, p);
    let head = this.head;
    for (const [k, v] of Object.entries(w.headers)) head += `${k}: ${v}\r\n`;
    head += `Content-Length: ${w.body.length}\r\n\r\n`;
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), w.body]));
  }
}

export interface DriveOptions<T> {
  url: string;
  items: T[];
  request: (item: T) => SignedWebhook;
  /** At most this many requests in flight (and sockets open). */
  concurrency: number;
  /** Requests per second, open-loop; as fast as concurrency allows when absent. */
  rate?: number;
  onResponse?: (item: T, status: number, body: string, endedAt: number) => void;
}

export async function drive<T>(opts: DriveOptions<T>): Promise<LoadResult> {
  const client = new WebhookClient(opts.url, opts.concurrency);
  const latencies = new Latencies();
  const statuses: Record<string, number> = {};
  let errors = 0;
  let sent = 0;
  let inFlight = 0;
  const started = performance.now();

  await new Promise<void>((resolve) => {
    let done = 0;
    const total = opts.items.length;
    if (total === 0) return resolve();
    const send = (item: T) => {
      inFlight++;
      void client.post(opts.request(item)).then((r) => {
        inFlight--;
        if (r.status === null) errors++;
        else {
          latencies.record(r.ms);
          statuses[r.status] = (statuses[r.status] ?? 0) + 1;
          opts.onResponse?.(item, r.status, r.body, r.endedAt);
        }
        if (++done === total) resolve();
        else pump();
      });
    };
    let timer: NodeJS.Timeout | undefined;
    const pump = () => {
      const due = opts.rate
        ? Math.min(total, Math.floor(((performance.now() - started) / 1000) * opts.rate) + 1)
        : total;
      while (sent < due && inFlight < opts.concurrency) send(opts.items[sent++]!);
      if (opts.rate && sent < total && !timer) {
        timer = setTimeout(() => {
          timer = undefined;
          pump();
        }, 1);
      }
    };
    pump();
  });
  client.close();
  const seconds = (performance.now() - started) / 1000;
  return {
    requests: latencies.count,
    seconds,
    rate: latencies.count / seconds,
    statuses,
    errors,
    latency: latencies.summary(),
    exhausted: false,
  };
}
