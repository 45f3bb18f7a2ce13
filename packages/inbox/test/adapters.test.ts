// The inbox mounted the ways the README shows: Express (before any body parser,
// after express.raw(), or with a JSON parser's verify hook keeping the raw body),
// a Fetch handler as Next.js, Hono, Bun and Deno call it, Fastify with a raw-body
// content-type parser, and plain node:http. Each over real HTTP where there is a server.

import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox } from '../src/index.js';
import {
  customerDatabase,
  effects,
  handsetEvent,
  newEndpointSecret,
  post,
  recordEffect,
  serve,
  sign,
  type CustomerDatabase,
} from './support.js';

let db: CustomerDatabase;
const secret = newEndpointSecret();
const closers: (() => Promise<unknown>)[] = [];
const errors: unknown[] = [];

beforeAll(async () => {
  db = await customerDatabase();
  await createInbox({ pool: db.pool, secret }).migrate();
});
afterAll(async () => {
  for (const close of closers) await close();
  await db.drop();
});

const inbox = () => createInbox({ pool: db.pool, secret, onError: (e) => errors.push(e) });

/** A body with a space and a non-ASCII character: any re-serialisation breaks its signature. */
const tricky = () =>
  handsetEvent({ data: { id: `msg_${Math.random().toString(36).slice(2)}`, body: 'Hé  there', sequence: 1 } });

async function listen(app: express.Express): Promise<string> {
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => server.once('listening', resolve));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('Express', () => {
  it('mounted before express.json(), which the app’s other routes still use: handled, then duplicate', async () => {
    const app = express();
    app.post('/webhooks/handset', inbox().nodeHandler(recordEffect));
    app.use(express.json());
    app.post('/echo', (req, res) => {
      res.json(req.body);
    });
    const base = await listen(app);
    const event = tricky();
    expect((await post(`${base}/webhooks/handset`, sign(event, secret))).json.result).toBe('handled');
    expect((await post(`${base}/webhooks/handset`, sign(event, secret))).json.result).toBe('duplicate');
    const echo = await fetch(`${base}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"a":1}',
    });
    expect(await echo.json()).toEqual({ a: 1 });
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('after express.raw({ type: "application/json" }) on its route: handled', async () => {
    const app = express();
    app.post('/webhooks/handset', express.raw({ type: 'application/json' }), inbox().nodeHandler(recordEffect));
    const base = await listen(app);
    const event = tricky();
    expect((await post(`${base}/webhooks/handset`, sign(event, secret))).json.result).toBe('handled');
  });

  it('behind a global express.json() with a verify hook that keeps req.rawBody: handled', async () => {
    const app = express();
    app.use(
      express.json({
        verify: (req, _res, buf) => {
          (req as unknown as { rawBody: Buffer }).rawBody = buf;
        },
      }),
    );
    app.post('/webhooks/handset', inbox().nodeHandler(recordEffect));
    const base = await listen(app);
    expect((await post(`${base}/webhooks/handset`, sign(tricky(), secret))).json.result).toBe('handled');
  });

  it('behind a global express.json() without the raw body: 500, nothing kept, and onError says to mount it first', async () => {
    const app = express();
    app.use(express.json());
    app.post('/webhooks/handset', inbox().nodeHandler(recordEffect));
    const base = await listen(app);
    const event = tricky();
    errors.length = 0;
    const answer = await post(`${base}/webhooks/handset`, sign(event, secret));
    expect([answer.status, answer.json.result]).toEqual([500, 'handler_failed']);
    expect(String(errors[0])).toMatch(/mount the inbox before express\.json\(\)/);
    expect(await effects(db.pool, event.id)).toBe(0);
  });
});

describe('Fetch (Next.js route handlers, Hono, Bun, Deno)', () => {
  it('a Request with a Headers object: handled, then duplicate; a tampered body 401; a Response with JSON', async () => {
    const POST = inbox().fetchHandler(recordEffect); // export const POST = … in app/api/webhooks/route.ts
    const event = tricky();
    const delivery = sign(event, secret);
    const request = (body: string) =>
      new Request('https://example.com/api/webhooks', { method: 'POST', headers: delivery.headers, body });
    const first = await POST(request(delivery.body));
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toBe('application/json');
    expect(await first.json()).toEqual({ result: 'handled', event_id: event.id });
    expect(await (await POST(request(delivery.body))).json()).toEqual({ result: 'duplicate', event_id: event.id });
    const tampered = await POST(request(delivery.body.replace('Hé', 'He')));
    expect(tampered.status).toBe(401);
    expect(await effects(db.pool, event.id)).toBe(1);
  });
});

describe('Fastify', () => {
  it('the README recipe: a raw-body JSON parser in an encapsulated plugin; other routes still get parsed JSON', async () => {
    const app = Fastify();
    const hooks = inbox();
    await app.register(async (webhooks) => {
      webhooks.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
      webhooks.post('/webhooks/handset', async (req, reply) => {
        const outcome = await hooks.receive({ body: req.body as Buffer, headers: req.headers }, recordEffect);
        return reply.code(outcome.status).send({ result: outcome.result });
      });
    });
    app.post('/echo', async (req) => req.body);
    const base = await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    const event = tricky();
    expect((await post(`${base}/webhooks/handset`, sign(event, secret))).json.result).toBe('handled');
    expect((await post(`${base}/webhooks/handset`, sign(event, secret))).json.result).toBe('duplicate');
    const echo = await fetch(`${base}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"b":2}',
    });
    expect(await echo.json()).toEqual({ b: 2 });
  });
});

describe('node:http', () => {
  it('a body over maxBodyBytes is 400 without reading it into memory, and the server answers the next request', async () => {
    const small = createInbox({ pool: db.pool, secret, maxBodyBytes: 1024, onError: () => {} });
    const served = await serve(small.nodeHandler(recordEffect));
    closers.push(() => served.close());
    const big = handsetEvent({ data: { id: 'msg_big', body: 'x'.repeat(4096) } });
    const answer = await post(served.url, sign(big, secret));
    expect([answer.status, answer.json.result]).toEqual([400, 'bad_request']);
    expect(await effects(db.pool, big.id)).toBe(0);
    const event = tricky();
    expect((await post(served.url, sign(event, secret))).json.result).toBe('handled');
  });
});
