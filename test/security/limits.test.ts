// Slow bodies, stalled requests and header floods against both HTTP servers
// (ingest and API), as built by src. The timeouts are fixed in
// the code (ingest: requestTimeout 10 s, connectionTimeout 15 s; API: 30 s and
// 30 s) with no setting to shorten them, so:
//   - the configured values are read off the built servers;
//   - the real servers are given clients that trickle their body, trickle their
//     headers, or stop sending, and must hang up within requestTimeout + 2 s.
//     Today they do not (bug B5): Node enforces min(requestTimeout,
//     headersTimeout) on the head and the max of the two on the whole request,
//     both servers leave headersTimeout at Node's 60 s, and Node only sweeps for
//     expired requests every 30 s. The measured times (about 90 s for a
//     trickled body) come from the opt-in test behind HANDSET_SLOW_LIMITS=1;
//   - the same clients against a built ingest server with the Node timeouts set
//     the way the fix would set them show the cut-off (408) and that a cut-off
//     webhook stores nothing;
//   - a huge header or thousands of headers get 431 promptly, never a hang or a
//     500, and a slowloris crowd does not keep a real webhook from being stored;
//   - a body refused for the held-body budget, or as over the size limit, is
//     answered (503, 413) and its connection closed, the rest of it never read.

import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tenantRoutes } from '../../src/accounts/routes.js';
import { buildApiServer } from '../../src/api/server.js';
import { telnyxAdapter } from '../../src/carrier/telnyx/adapter.js';
import { signTelnyxWebhook } from '../../src/carrier/telnyx/signature.js';
import { buildIngestServer } from '../../src/ingest/server.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { envelope, telnyxCarriers, telnyxKeys } from '../support/carrier.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { testConfig, testKeys } from '../support/platform.js';
import { exchange, rawRequest, requestHead, urlParts, type RawAnswer } from './support/raw-http.js';

const keys = telnyxKeys();
let db: TestDatabase;
let ingest: FastifyInstance;
let api: FastifyInstance;
let ingestUrl: string;
let apiUrl: string;
let client: ApiClient;

const log = createLogger('silent');

function buildIngest(limits: { heldBodyBudget?: number } = {}) {
  return buildIngestServer({
    pool: db.pool,
    carriers: new Map([['telnyx', telnyxAdapter({ publicKey: keys.publicKeyBase64, toleranceSeconds: 300 })]]),
    log,
    metrics: new Metrics({ defaultMetrics: false }),
    ...limits,
  });
}

function buildApi() {
  return buildApiServer({
    pool: db.pool,
    config: testConfig({ HANDSET_API_RATE_LIMIT: '1000000', HANDSET_ADDRESS_RATE_LIMIT: '1000000' }),
    carriers: telnyxCarriers(),
    keys: testKeys,
    log,
    metrics: new Metrics({ defaultMetrics: false }),
    routes: [tenantRoutes],
  });
}

async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  db = await createTestDatabase();
  ingest = buildIngest();
  api = await buildApi();
  ingestUrl = `${await listen(ingest)}/webhooks/telnyx`;
  apiUrl = await listen(api);
  client = await createAccount(db.pool, apiUrl, 'Limits');
});
afterAll(async () => {
  await ingest.close();
  await api.close();
  await db.drop();
});

const events = () => count(db.pool, 'SELECT * FROM carrier_events');

function signed(body: Buffer): [string, string][] {
  const h = signTelnyxWebhook(keys.privateKey, Math.floor(Date.now() / 1000), body);
  return [
    ['telnyx-timestamp', h['telnyx-timestamp']],
    ['telnyx-signature-ed25519', h['telnyx-signature-ed25519']],
  ];
}

type Slow = 'trickled body' | 'trickled headers' | 'stalled body';

/**
 * A client that sends the request head (or part of it) and then either trickles
 * one byte every `everyMs` or goes silent; resolves when the server hangs up.
 */
function slowClient(
  url: string,
  how: Slow,
  headers: [string, string][],
  everyMs: number,
  giveUpMs: number,
): Promise<RawAnswer> {
  const { host, port, path } = urlParts(url);
  const body = Buffer.from(envelope(`slow-${how}-${Math.random()}`));
  const head = requestHead('POST', path, [
    ['host', `${host}:${port}`],
    ['content-type', 'application/json'],
    ['content-length', String(body.length)],
    ...headers,
  ]);
  return exchange(
    host,
    port,
    (socket) => {
      let timer: NodeJS.Timeout | undefined;
      socket.on('close', () => clearInterval(timer));
      if (how === 'trickled headers') {
        // the request line and one more header line every tick, never the blank line
        socket.write(`POST ${path} HTTP/1.1\r\nhost: ${host}:${port}\r\n`);
        let n = 0;
        timer = setInterval(() => socket.writable && socket.write(`x-slow-${n++}: ${n}\r\n`), everyMs);
        return;
      }
      socket.write(head);
      if (how === 'trickled body') {
        let i = 0;
        timer = setInterval(() => {
          if (socket.writable && i < body.length - 1) socket.write(body.subarray(i, ++i)); // never the last byte
        }, everyMs);
      }
    },
    giveUpMs,
  );
}

// ---------------------------------------------------------------------------

describe('configured limits', () => {
  it("both servers set a request timeout, an idle timeout and Node's 16 KiB header limit", () => {
    const read = (app: FastifyInstance) => ({
      requestTimeout: app.server.requestTimeout,
      headersTimeout: app.server.headersTimeout,
      idleTimeout: app.server.timeout,
      maxHeaderSize: (app.server as unknown as { maxHeaderSize?: number }).maxHeaderSize ?? http.maxHeaderSize,
      checkingInterval: (app.server as unknown as { connectionsCheckingInterval: number }).connectionsCheckingInterval,
    });
    const values = { ingest: read(ingest), api: read(api) };
    console.log('limits: configured', values);
    expect(values.ingest).toMatchObject({ requestTimeout: 10_000, idleTimeout: 15_000, maxHeaderSize: 16 * 1024 });
    expect(values.api).toMatchObject({ requestTimeout: 30_000, idleTimeout: 30_000, maxHeaderSize: 16 * 1024 });
  });
});

describe('header floods', () => {
  const targets = () => [['ingest', ingestUrl] as const, ['api', `${apiUrl}/v1/tenants`] as const];

  it('a single 20 KiB header, or 3,000 headers, is 431 (or the connection closed) within seconds, never a hang or a 500', async () => {
    for (const [name, url] of targets()) {
      for (const flood of [
        [['x-big', 'a'.repeat(20 * 1024)]] as [string, string][],
        Array.from({ length: 3000 }, (_, i) => [`x-h${i}`, 'v'] as [string, string]),
        [['authorization', `Bearer ${'A'.repeat(20 * 1024)}`]] as [string, string][],
        [['telnyx-signature-ed25519', 'A'.repeat(20 * 1024)]] as [string, string][],
      ]) {
        const a = await rawRequest(url, { headers: flood, body: '{}', timeoutMs: 5000 });
        const what = `${name}: ${flood.length} header(s) of ${flood[0]![1].length} bytes`;
        expect(a.closedByServer, `${what}: no answer and not closed`).toBe(true);
        // the idle timeout is 15 s: closed this early means the header limit did it (bound loose for loaded CI)
        expect(a.closedAfterMs, what).toBeLessThan(3000);
        expect([431, null], `${what}: ${a.status} ${a.body}`).toContain(a.status);
      }
    }
    expect(await events()).toBe(0);
  });

  it("just under the limit (2,500 tiny headers, past Node's 2,000-header count) is answered normally: 401, not a hang or a 500", async () => {
    for (const [name, url] of targets()) {
      const a = await rawRequest(url, {
        headers: Array.from({ length: 2500 }, () => ['a', 'b'] as [string, string]),
        body: '{}',
        timeoutMs: 5000,
      });
      expect([name, a.status]).toEqual([name, 401]);
    }
  });

  it('a signed webhook whose signature headers come after 2,000 others is refused 401 (Node keeps only the first 2,000) and stores nothing', async () => {
    const body = Buffer.from(envelope('flood-late-signature'));
    const junk = Array.from({ length: 2000 }, () => ['a', 'b'] as [string, string]);
    const a = await rawRequest(ingestUrl, {
      headers: [
        ['content-type', 'application/json'],
        ['content-length', String(body.length)],
        ...junk,
        ...signed(body),
      ],
      body,
      timeoutMs: 5000,
    });
    expect([a.status, a.body]).toEqual([401, '{"error":"missing_signature"}']);
    expect(await events()).toBe(0);
  });

  it('200 connections trickling headers and bodies do not keep a real webhook from being stored, nor an API call from being answered, well before the crowd gives up', async () => {
    const crowd: Promise<RawAnswer>[] = [];
    for (let i = 0; i < 100; i++) {
      crowd.push(
        slowClient(ingestUrl, i % 2 ? 'trickled body' : 'trickled headers', signed(Buffer.from('x')), 200, 4000),
      );
      crowd.push(
        slowClient(
          `${apiUrl}/v1/tenants`,
          i % 2 ? 'trickled body' : 'trickled headers',
          [['authorization', `Bearer ${client.key}`]],
          200,
          4000,
        ),
      );
    }
    await new Promise((r) => setTimeout(r, 500));
    const body = Buffer.from(envelope('through-the-crowd'));
    let started = performance.now();
    const hook = await rawRequest(ingestUrl, {
      headers: [['content-type', 'application/json'], ...signed(body)],
      body,
    });
    const hookMs = performance.now() - started;
    started = performance.now();
    const call = await client.get('/v1/tenants');
    const callMs = performance.now() - started;
    expect({ hook: hook.status, call: call.status }).toEqual({ hook: 200, call: 200 });
    // starved, they would wait out the crowd (4 s); the bound is loose for a loaded CI machine
    expect(hookMs).toBeLessThan(3000);
    expect(callMs).toBeLessThan(3000);
    await Promise.all(crowd);
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'slow-%'`)).toBe(0);
  });
});

describe('slow and stalled requests', () => {
  const SLOW: Slow[] = ['trickled body', 'trickled headers', 'stalled body'];

  /** Runs every slow client against both real servers at once; ms until each was hung up on (null: still open at giveUp). */
  async function hangUps(giveUpMs: { ingest: number; api: number }) {
    const cases: [string, Promise<RawAnswer>][] = [];
    for (const how of SLOW) {
      cases.push([`ingest ${how}`, slowClient(ingestUrl, how, signed(Buffer.from('x')), 500, giveUpMs.ingest)]);
      cases.push([
        `api ${how}`,
        slowClient(`${apiUrl}/v1/tenants`, how, [['authorization', `Bearer ${client.key}`]], 500, giveUpMs.api),
      ]);
    }
    const out: Record<string, number | null> = {};
    for (const [name, p] of cases) {
      const r = await p;
      out[name] = r.closedByServer ? Math.round(r.closedAfterMs) : null;
    }
    return out;
  }

  it('with the Node timeouts set as the fix for B5 would set them (on a built ingest server), a trickled or stalled webhook is cut off with 408 in time and stores nothing', async () => {
    // requestTimeout alone is not enough: Node swaps it with a larger headersTimeout (see B5).
    const quick = buildIngest();
    quick.server.requestTimeout = 1000;
    quick.server.headersTimeout = 1000;
    (quick.server as unknown as { connectionsCheckingInterval: number }).connectionsCheckingInterval = 100;
    const url = `${await listen(quick)}/webhooks/telnyx`;
    try {
      const results = await Promise.all(SLOW.map((how) => slowClient(url, how, signed(Buffer.from('x')), 100, 5000)));
      for (const [i, r] of results.entries()) {
        expect({ how: SLOW[i], closed: r.closedByServer, status: r.status }).toEqual({
          how: SLOW[i],
          closed: true,
          status: 408,
        });
        expect(r.closedAfterMs).toBeGreaterThanOrEqual(900);
        expect(r.closedAfterMs).toBeLessThan(3000); // Node's default 30 s check interval (B5) would be far past this
      }
      expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'slow-%'`)).toBe(0);
    } finally {
      await quick.close();
    }
  });

  // Regression: bug B5 (fixed). Node uses min(requestTimeout, headersTimeout) for the head and the max for the whole
  // request, and sweeps only every 30 s; both servers leave headersTimeout at Node's 60 s.
  it('B5: the real servers hang up on a client that trickles its body, trickles its headers or stalls, within their requestTimeout (ingest 10 s, API 30 s) + 5 s', async () => {
    // Node checks timeouts once a second; the 5 s margin is for a loaded CI machine. The bug
    // this guards against held clients for 60 s + 30 s.
    const out = await hangUps({ ingest: 15_000, api: 35_000 });
    console.log('limits: ms until the real servers hung up within requestTimeout + 5 s (null: still open)', out);
    expect(
      Object.entries(out)
        .filter(([, ms]) => ms === null)
        .map(([name]) => name),
    ).toEqual([]);
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'slow-%'`)).toBe(0);
  }, 60_000);

  // About 90 s, so only when asked for (HANDSET_SLOW_LIMITS=1): how long the real servers hold a slow client today.
  it.runIf(process.env.HANDSET_SLOW_LIMITS === '1')(
    "the real servers do hang up on every slow client eventually, within Node's 60 s headersTimeout + its 30 s sweep",
    async () => {
      const out = await hangUps({ ingest: 100_000, api: 100_000 });
      console.log('limits: ms until the real servers hung up on a slow client (null: still open after 100 s)', out);
      for (const [name, ms] of Object.entries(out)) expect(ms, name).not.toBeNull();
      for (const [name, ms] of Object.entries(out)) expect(ms!, name).toBeLessThanOrEqual(60_000 + 30_000 + 2000);
      expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'slow-%'`)).toBe(0);
    },
    150_000,
  );
});

describe('the held-body budget', () => {
  it('a body refused for the budget is answered 503 and closed, the rest of it never read', async () => {
    const small = buildIngest({ heldBodyBudget: 1024 });
    const read: Socket[] = [];
    small.server.on('connection', (socket: Socket) => read.push(socket));
    const { host, port, path } = urlParts(`${await listen(small)}/webhooks/telnyx`);
    try {
      const head = envelope('over-budget', 'message.received', { text: '' });
      const body = Buffer.from(head.replace('"text":""', `"text":"${'x'.repeat(200 * 1024)}"`));
      const sent = body.length - 1024;
      const answer = await exchange(
        host,
        port,
        (socket) => {
          socket.write(
            requestHead('POST', path, [
              ['host', `${host}:${port}`],
              ['content-type', 'application/json'],
              ['content-length', String(body.length)],
              ...signed(body),
            ]),
          );
          socket.write(body.subarray(0, sent)); // all but the last KiB, then nothing
        },
        5000,
      );
      expect({ status: answer.status, closed: answer.closedByServer }).toEqual({ status: 503, closed: true });
      expect(JSON.parse(answer.body)).toEqual({ error: 'unavailable', detail: 'try again' });
      // Reading stopped at the refusal: well short of what was sent (one read is at most 64 KiB).
      expect(read.length).toBe(1);
      expect(read[0]!.bytesRead).toBeLessThan(sent / 2);
      expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id = 'over-budget'`)).toBe(0);
    } finally {
      await small.close();
    }
  });
});

describe('an oversized body', () => {
  // One MiB of a body that says it is 4 MiB (or says nothing, chunked): refused by
  // its declared length at once, or once its running size passes the limit, and the
  // connection closed once the answer is out, so the rest is neither read nor waited
  // for. Measured: 64 KiB read by content-length, 296 KB chunked; before the close
  // came at the answer's end, 98 and 326 KB, and beside two busy loops at times the
  // whole MiB.
  it.each([
    ['declared by content-length', true],
    ['found by its running size (chunked)', false],
  ])('a body over the limit, %s, is answered 413 and closed, the rest of it never read', async (_, declared) => {
    const read: Socket[] = [];
    const onConnection = (socket: Socket) => read.push(socket);
    ingest.server.on('connection', onConnection);
    const { host, port, path } = urlParts(ingestUrl);
    const sent = 1024 * 1024;
    try {
      const answer = await exchange(
        host,
        port,
        (socket) => {
          const length: [string, string][] = declared
            ? [['content-length', String(4 * sent)]]
            : [['transfer-encoding', 'chunked']];
          socket.write(
            requestHead('POST', path, [['host', `${host}:${port}`], ['content-type', 'application/json'], ...length]),
          );
          const piece = Buffer.alloc(64 * 1024, 'x');
          for (let at = 0; at < sent; at += piece.length)
            socket.write(
              declared
                ? piece
                : Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]),
            );
        },
        3000,
      );
      expect({ status: answer.status, closed: answer.closedByServer }).toEqual({ status: 413, closed: true });
      expect(JSON.parse(answer.body)).toMatchObject({ error: 'too_large' });
      expect(read.length).toBe(1);
      // The limit (256 KiB) and a read or two past it at most, of the MiB sent.
      expect(read[0]!.bytesRead).toBeLessThan(sent / 2);
    } finally {
      ingest.server.off('connection', onConnection);
    }
  });
});

// Regression: bug B6 (fixed). Node's and Fastify's protocol-level refusals bypass the API's problem+json handler.
describe('regressions: bugs these tests found, now fixed', () => {
  it('B6: the API answers protocol-level refusals (431 header flood, 400 unparseable head) as problem+json like every other error', async () => {
    const url = `${apiUrl}/v1/tenants`;
    const results: string[] = [];
    for (const headers of [
      [['x-big', 'a'.repeat(20 * 1024)]],
      [['x-ctl', Buffer.from('a\u0001b', 'latin1')]],
      [['idempotency-key', Buffer.from('k\u0000', 'latin1')]],
    ] as [string, string | Buffer][][]) {
      const a = await rawRequest(url, {
        headers: [['authorization', `Bearer ${client.key}`], ...headers],
        body: '{}',
        timeoutMs: 3000,
      });
      if (!/^application\/problem\+json/.test(a.headers['content-type'] ?? ''))
        results.push(`${a.status} ${a.headers['content-type']}: ${a.body}`);
    }
    expect(results).toEqual([]);
  });
});
