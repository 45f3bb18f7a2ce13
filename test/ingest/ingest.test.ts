// The ingest endpoint: verify, store once, enqueue in the same transaction, and
// answer 200 stored or duplicate, 401 bad signature, 400 not an envelope, 413 too
// large, 503 when the database cannot store. Real PostgreSQL, real HTTP, real signatures.

import { generateKeyPairSync } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { telnyxAdapter } from '../../src/carrier/telnyx/adapter.js';
import { signTelnyxWebhook } from '../../src/carrier/telnyx/signature.js';
import { createPool } from '../../src/db/pool.js';
import { buildIngestServer, storableJson } from '../../src/ingest/server.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { envelope, fixture, postWebhook, telnyxKeys } from '../support/carrier.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { exchange, requestHead } from '../security/support/raw-http.js';

const keys = telnyxKeys();
let db: TestDatabase;
let app: FastifyInstance;
let url: string;

async function startIngest(pool = db.pool): Promise<{ app: FastifyInstance; url: string }> {
  const server = buildIngestServer({
    pool,
    carriers: new Map([['telnyx', telnyxAdapter({ publicKey: keys.publicKeyBase64, toleranceSeconds: 300 })]]),
    log: createLogger('silent'),
    metrics: new Metrics({ defaultMetrics: false }),
  });
  await server.listen({ host: '127.0.0.1', port: 0 });
  return { app: server, url: `http://127.0.0.1:${(server.server.address() as AddressInfo).port}/webhooks/telnyx` };
}

const events = () => count(db.pool, 'SELECT * FROM carrier_events');
/** Stored events due for processing: each one is its own processing job (the relay claims it). */
const jobs = () => count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL AND run_after IS NULL');

beforeAll(async () => {
  db = await createTestDatabase();
  ({ app, url } = await startIngest());
});
afterAll(async () => {
  await app.close();
  await db.drop();
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE carrier_events');
  await db.pool.query('DELETE FROM graphile_worker._private_jobs');
});

describe('signature', () => {
  it('a valid webhook is stored once, pending: its own processing job, and no queued job beside it', async () => {
    const res = await postWebhook(url, keys, fixture('message-finalized-delivered'));
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ status: 'stored' });
    const { rows } = await db.pool.query(
      'SELECT carrier, carrier_event_id, event_type, processed_at FROM carrier_events',
    );
    expect(rows).toEqual([
      {
        carrier: 'telnyx',
        carrier_event_id: '4ee8c3a6-4995-4309-a3c6-38e3db9ea4be',
        event_type: 'message.finalized',
        processed_at: null,
      },
    ]);
    expect(await jobs()).toBe(1);
    expect(await count(db.pool, 'SELECT * FROM graphile_worker.jobs')).toBe(0);
  });

  it('a tampered body is refused and nothing is stored', async () => {
    const body = fixture('message-sent');
    const headers = signTelnyxWebhook(keys.privateKey, Math.floor(Date.now() / 1000), body);
    const res = await fetch(url, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: body.replace('Hello there!', 'Hello there?'),
    });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'bad_signature' });
    expect(await events()).toBe(0);
    expect(await jobs()).toBe(0);
  });

  it('a signature made with another key is refused', async () => {
    const other = { ...keys, privateKey: generateKeyPairSync('ed25519').privateKey };
    const res = await postWebhook(url, other, fixture('message-sent'));
    expect(res.status).toBe(401);
    expect(await events()).toBe(0);
  });

  it('missing or malformed signature headers are refused', async () => {
    const body = fixture('message-sent');
    const ts = Math.floor(Date.now() / 1000);
    const good = signTelnyxWebhook(keys.privateKey, ts, body);
    const cases: [Record<string, string>, string][] = [
      [{}, 'missing_signature'],
      [{ 'telnyx-timestamp': String(ts) }, 'missing_signature'],
      [{ 'telnyx-signature-ed25519': good['telnyx-signature-ed25519'] }, 'missing_signature'],
      [{ ...good, 'telnyx-signature-ed25519': 'not base64!' }, 'malformed_signature'],
      [
        {
          ...good,
          'telnyx-signature-ed25519': Buffer.from(good['telnyx-signature-ed25519'], 'base64').toString('base64url'),
        },
        'malformed_signature',
      ],
      [{ ...good, 'telnyx-signature-ed25519': Buffer.alloc(32).toString('base64') }, 'malformed_signature'],
      [{ ...good, 'telnyx-timestamp': `${ts}000` }, 'stale_timestamp'],
      [{ ...good, 'telnyx-timestamp': `${ts}.5` }, 'malformed_signature'],
      [{ ...good, 'telnyx-timestamp': `-${ts}` }, 'malformed_signature'],
    ];
    for (const [headers, error] of cases) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
      });
      expect({ headers, status: res.status, body: await res.json() }).toEqual({
        headers,
        status: 401,
        body: { error },
      });
    }
    expect(await events()).toBe(0);
  });

  it('a timestamp 301 s in the past or the future is refused; 299 s is accepted', async () => {
    const now = Math.floor(Date.now() / 1000);
    expect((await postWebhook(url, keys, envelope('old'), { timestamp: now - 301 })).status).toBe(401);
    expect((await postWebhook(url, keys, envelope('future'), { timestamp: now + 301 })).status).toBe(401);
    expect(await events()).toBe(0);
    expect((await postWebhook(url, keys, envelope('recent'), { timestamp: now - 299 })).status).toBe(200);
    expect((await postWebhook(url, keys, envelope('soon'), { timestamp: now + 299 })).status).toBe(200);
    expect(await events()).toBe(2);
  });

  it('verifies the raw bytes: a pretty-printed body with non-ASCII text is accepted as sent', async () => {
    const body = fixture('message-received').replace('Hello from Telnyx!', 'Grüße aus Zürich 👋 — ça va?');
    expect(body).toContain('\n  "data": {'); // still pretty-printed
    const res = await postWebhook(url, keys, body);
    expect(res.status).toBe(200);
    const { rows } = await db.pool.query(`SELECT payload->'data'->'payload'->>'text' AS text FROM carrier_events`);
    expect(rows[0].text).toBe('Grüße aus Zürich 👋 — ça va?');
  });
});

describe('duplicates', () => {
  it('the same event five times in a row is one row and one job', async () => {
    const body = fixture('message-sent');
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await postWebhook(url, keys, body)).json['status']);
    expect(statuses).toEqual(['stored', 'duplicate', 'duplicate', 'duplicate', 'duplicate']);
    expect(await events()).toBe(1);
    expect(await jobs()).toBe(1);
  });

  it('the same event twenty times concurrently is one row and one job', async () => {
    const body = fixture('call-hangup');
    const results = await Promise.all(Array.from({ length: 20 }, () => postWebhook(url, keys, body)));
    expect(results.map((r) => r.status)).toEqual(Array(20).fill(200));
    expect(results.filter((r) => r.json['status'] === 'stored')).toHaveLength(1);
    expect(await events()).toBe(1);
    expect(await jobs()).toBe(1);
  });

  it('a retry of the same event with a new attempt number and signature is still a duplicate', async () => {
    const first = fixture('message-sent');
    const retry = first.replace('"attempt":1', '"attempt":2');
    expect(retry).not.toBe(first);
    await postWebhook(url, keys, first);
    expect((await postWebhook(url, keys, retry, { timestamp: Math.floor(Date.now() / 1000) + 3 })).json).toEqual({
      status: 'duplicate',
    });
    expect(await events()).toBe(1);
  });
});

describe('atomicity and failures', () => {
  it('when the write fails after the row went in, inside its transaction, nothing is stored and the answer is 5xx', async () => {
    await db.pool.query(
      `CREATE FUNCTION refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'queue unavailable'; END $$`,
    );
    await db.pool.query(
      `CREATE TRIGGER refuse_job AFTER INSERT ON carrier_events FOR EACH ROW EXECUTE FUNCTION refuse_job()`,
    );
    try {
      const res = await postWebhook(url, keys, fixture('message-sent'));
      expect(res.status).toBe(503);
      expect(res.json).toEqual({ error: 'unavailable', detail: 'try again' });
      expect(await events()).toBe(0);
      expect(await jobs()).toBe(0);
    } finally {
      await db.pool.query('DROP TRIGGER refuse_job ON carrier_events; DROP FUNCTION refuse_job()');
    }
    // The carrier's retry is then stored, once.
    expect((await postWebhook(url, keys, fixture('message-sent'))).json).toEqual({ status: 'stored' });
    expect(await jobs()).toBe(1);
  });

  it('with the database unreachable the answer is 503, never 2xx; the retry after recovery is stored once', async () => {
    const target = new URL(db.url);
    const proxy: TcpProxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
    const proxied = new URL(db.url);
    proxied.host = `127.0.0.1:${proxy.port}`;
    const pool = createPool(proxied.toString(), { max: 4, applicationName: 'ingest-proxied' });
    const ingest = await startIngest(pool);
    try {
      const body = fixture('message-finalized-failed');
      expect((await postWebhook(ingest.url, keys, envelope('warm-up'))).status).toBe(200);
      proxy.cut();
      const during = await Promise.all(Array.from({ length: 5 }, () => postWebhook(ingest.url, keys, body)));
      expect(during.map((r) => r.status)).toEqual(Array(5).fill(503));
      expect(
        await count(
          db.pool,
          `SELECT * FROM carrier_events WHERE carrier_event_id = '6f1c8a52-2a4e-4b0b-9d0e-4a1f2d3c4b5a'`,
        ),
      ).toBe(0);
      proxy.restore();
      const after = await Promise.all(Array.from({ length: 3 }, () => postWebhook(ingest.url, keys, body)));
      expect(after.map((r) => r.status)).toEqual([200, 200, 200]);
      expect(after.filter((r) => r.json['status'] === 'stored')).toHaveLength(1);
      expect(
        await count(
          db.pool,
          `SELECT * FROM carrier_events WHERE carrier_event_id = '6f1c8a52-2a4e-4b0b-9d0e-4a1f2d3c4b5a'`,
        ),
      ).toBe(1);
      expect(await jobs()).toBe(2);
    } finally {
      await ingest.app.close();
      await pool.end();
      await proxy.close();
    }
  });
});

describe('bad input', () => {
  it('a body over the limit (256 KiB) is 413 and stores nothing', async () => {
    const big = envelope('big', 'message.received', { text: 'x'.repeat(256 * 1024) });
    const res = await postWebhook(url, keys, big);
    expect(res.status).toBe(413);
    expect(res.json).toMatchObject({ error: 'too_large' });
    expect(await events()).toBe(0);
  });

  it('a body that arrives in pieces, plain or chunked, is verified and stored byte for byte', async () => {
    const { port } = new URL(url);
    for (const chunked of [false, true]) {
      const id = `pieces-${chunked}`;
      // multi-byte characters, so a piece boundary falls inside one
      const body = Buffer.from(envelope(id, 'message.received', { text: 'Grüße 👋 '.repeat(6000) }));
      const ts = Math.floor(Date.now() / 1000);
      const head = requestHead('POST', '/webhooks/telnyx', [
        ['host', `127.0.0.1:${port}`],
        ['content-type', 'application/json'],
        ['connection', 'close'],
        chunked ? ['transfer-encoding', 'chunked'] : ['content-length', String(body.length)],
        ...Object.entries(signTelnyxWebhook(keys.privateKey, ts, body)),
      ]);
      const pieces = [1, 7777, 30_001, 65_536, body.length].map((end, i, ends) => body.subarray(ends[i - 1] ?? 0, end));
      const answer = await exchange(
        '127.0.0.1',
        Number(port),
        async (socket) => {
          socket.write(head);
          for (const piece of pieces) {
            socket.write(
              chunked
                ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')])
                : piece,
            );
            await new Promise((r) => setTimeout(r, 30));
          }
          if (chunked) socket.write('0\r\n\r\n');
        },
        5000,
      );
      expect(answer.status).toBe(200);
      const { rows } = await db.pool.query(
        `SELECT payload::text = $2::jsonb::text AS same FROM carrier_events WHERE carrier_event_id = $1`,
        [id, body.toString('utf8')],
      );
      expect(rows).toEqual([{ same: true }]);
    }
  });

  it('a signed body that is not a Telnyx envelope is 400 and stores nothing', async () => {
    for (const body of [
      '{"hello":"world"}',
      '{"data":{"id":"x"}}',
      '{"data":{"event_type":"message.sent"}}',
      '[]',
      'null',
      '{"data":{"id":"","event_type":"a"}}',
    ]) {
      const res = await postWebhook(url, keys, body);
      expect({ body, status: res.status, error: res.json['error'] }).toEqual({
        body,
        status: 400,
        error: 'not_an_envelope',
      });
    }
    expect(await events()).toBe(0);
  });

  it('a signed body that is not UTF-8 JSON is 400 and stores nothing', async () => {
    for (const body of ['not json', '{"data":', Buffer.from([0x7b, 0xff, 0xfe, 0x7d])]) {
      const res = await postWebhook(url, keys, body);
      expect(res.status).toBe(400);
      expect(res.json['error']).toBe('malformed_body');
    }
    expect(await events()).toBe(0);
  });

  it('an authentic webhook with an escaped NUL (which jsonb cannot hold) is stored with U+FFFD, not refused and lost', async () => {
    const res = await postWebhook(
      url,
      keys,
      envelope('nul', 'message.received', { text: 'a\u0000b', path: 'c:\\u0000d' }),
    );
    expect(res.status).toBe(200);
    const { rows } = await db.pool.query(
      `SELECT payload->'data'->'payload' AS p FROM carrier_events WHERE carrier_event_id = 'nul'`,
    );
    expect(rows[0].p).toEqual({ text: 'a\ufffdb', path: 'c:\\u0000d' }); // an escaped backslash before u0000 is left alone
  });

  it('an authentic webhook with a lone surrogate (an SMS cut mid-emoji; jsonb cannot hold it) is stored with U+FFFD; a whole pair is kept', async () => {
    // JSON.stringify escapes lone surrogates, as a carrier's JSON encoder would.
    const res = await postWebhook(
      url,
      keys,
      envelope('lone', 'message.received', {
        text: 'cut \ud83d',
        low: '\ude00!',
        pair: '😀',
        mid: 'x\uD800y',
        path: 'c:\\ud800',
      }),
    );
    expect(res.status).toBe(200);
    const { rows } = await db.pool.query(
      `SELECT payload->'data'->'payload' AS p FROM carrier_events WHERE carrier_event_id = 'lone'`,
    );
    expect(rows[0].p).toEqual({ text: 'cut \ufffd', low: '\ufffd!', pair: '😀', mid: 'x\ufffdy', path: 'c:\\ud800' });
  });

  it('storableJson rewrites exactly the escapes jsonb refuses, in either case, and nothing an escaped backslash protects', () => {
    expect(
      storableJson(String.raw`["\uD83D\uDE00","\uDBFF","\uDC00\uD800","\u0000","\\uDBFF","\\\uDBFF","\u00e9"]`),
    ).toBe(String.raw`["\uD83D\uDE00","\ufffd","\ufffd\ufffd","\ufffd","\\uDBFF","\\\ufffd","\u00e9"]`);
  });

  it('error bodies are small JSON without stack traces', async () => {
    const res = await fetch(url, { method: 'POST', body: 'x' });
    expect(res.status).toBe(401);
    const text = await res.text();
    expect(text.length).toBeLessThan(100);
    expect(text).not.toMatch(/at .*\.js|Error:/);
  });
});
