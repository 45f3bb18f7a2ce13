// How delivery uses its connections and its slots: one kept-alive connection per
// endpoint origin for consecutive webhooks, none kept for a receiver that hangs,
// and per-endpoint parallelism that follows how the endpoint answers. Real
// sockets on loopback; the capacity rules without a database.

import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Capacity, SLOW_ANSWER_MS } from '../../src/delivery/capacity.js';
import { sendWebhook } from '../../src/delivery/http.js';

interface Server {
  url: string;
  connections: Socket[];
  close(): Promise<void>;
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

async function serve(handler: http.RequestListener): Promise<Server> {
  const server = http.createServer(handler);
  const connections: Socket[] = [];
  server.on('connection', (s) => connections.push(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const s: Server = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
  servers.push(s);
  return s;
}

const opts = { timeoutMs: 2_000, allowPrivate: true };

describe('delivery connections', () => {
  it('consecutive webhooks to one endpoint share one kept-alive connection', async () => {
    const s = await serve((req, res) => req.resume().on('end', () => res.end('ok')));
    for (let i = 0; i < 20; i++) {
      expect((await sendWebhook(`${s.url}/hooks/${i % 3}`, {}, '{}', opts)).status).toBe(200);
    }
    expect(s.connections).toHaveLength(1);
  });

  it('a receiver that never answers times out and keeps no connection of ours', async () => {
    const s = await serve((req) => req.resume());
    const r = await sendWebhook(`${s.url}/hang`, {}, '{}', { ...opts, timeoutMs: 300 });
    expect(r).toMatchObject({ status: null, timedOut: true, error: 'timed out after 300 ms' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(s.connections.map((c) => c.destroyed)).toEqual([true]);
  });

  it('a receiver whose body never ends is cut off at the deadline with its status kept', async () => {
    const s = await serve((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('partial');
    });
    const r = await sendWebhook(`${s.url}/slow-body`, {}, '{}', { ...opts, timeoutMs: 300 });
    expect(r).toMatchObject({ status: 200, timedOut: false, excerpt: 'partial' });
  });
});

describe('per-endpoint slots', () => {
  it('a quickly answering endpoint earns slots up to all but one of its account’s', () => {
    const c = new Capacity(6);
    expect(c.limit('ep_a')).toBe(3);
    for (let i = 0; i < 10; i++) c.answered('ep_a', true, 5);
    expect(c.limit('ep_a')).toBe(5);
    const held = Array.from({ length: 5 }, () => c.take('acct', 'ep_a'));
    expect(held.every(Boolean)).toBe(true);
    expect(c.full('acct', 'ep_a')).toBe('endpoint');
    // The account's last slot is left to its other endpoints.
    expect(c.take('acct', 'ep_b')).not.toBeNull();
    expect(c.full('acct', 'ep_b')).toBe('account');
  });

  it('a slow answer or a failure leaves an endpoint one slot, and quick answers earn them back', () => {
    const c = new Capacity(6);
    for (let i = 0; i < 10; i++) c.answered('ep_a', true, 5);
    c.answered('ep_a', true, SLOW_ANSWER_MS + 1);
    expect(c.limit('ep_a')).toBe(1);
    const one = c.take('acct', 'ep_a');
    expect(one).not.toBeNull();
    expect(c.full('acct', 'ep_a')).toBe('endpoint');
    one!();
    c.answered('ep_a', true, 5);
    expect(c.limit('ep_a')).toBe(2);
    c.answered('ep_a', false, 5);
    expect(c.limit('ep_a')).toBe(1);
    expect(c.limit('ep_other')).toBe(3); // endpoints are judged apart
  });
});
