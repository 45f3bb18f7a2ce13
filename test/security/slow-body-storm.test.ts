// A storm of senders that each send most of a body as large as ingest accepts
// and then stall, against a real `handset serve --roles ingest` process on
// loopback with its default limits: the process holds at most its connection cap
// of them (the others are closed as soon as they connect), cuts the stalled ones
// off at its request timeout with a 408, stores and answers 2xx for none of them,
// and afterwards its resident memory is back within 20% of what it was before
// the storm, in the same run. It stays healthy: a webhook after the storm is stored.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signTelnyxWebhook } from '../../src/carrier/telnyx/signature.js';
import { loadConfig } from '../../src/config.js';
import { DEFAULT_BODY_LIMIT } from '../../src/ingest/server.js';
import { envelope, postWebhook, telnyxKeys } from '../support/carrier.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { serveRoles, type Served } from '../support/process.js';
import { exchange, requestHead, type RawAnswer } from './support/raw-http.js';

// The default cap, and a hundred senders more than it.
const CAP = loadConfig({}, 'serve').maxConnections.ingest;
const STORM = CAP + 100;
const keys = telnyxKeys();
let db: TestDatabase;
let served: Served;
let base: string;

/** Resident memory of the ingest process, in MiB (Linux: /proc). */
const rss = () =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${served.proc.child.pid}/status`, 'utf8'))![1]) / 1024;

beforeAll(async () => {
  db = await createTestDatabase();
  served = await serveRoles('ingest', { DATABASE_URL: db.url, TELNYX_PUBLIC_KEY: keys.publicKeyBase64 });
  base = served.ingestUrl!;
}, 60_000);
afterAll(async () => {
  served?.proc.child.kill('SIGKILL');
  await db.drop();
});

/** Opens a connection, sends the head and all but the last KiB of a signed body as large as allowed, then stalls. */
function staller(i: number): Promise<RawAnswer> {
  const id = `storm-${i}`;
  const head = envelope(id, 'message.received', { text: '' });
  const body = Buffer.from(head.replace('"text":""', `"text":"${'x'.repeat(DEFAULT_BODY_LIMIT - head.length)}"`));
  const { port } = new URL(base);
  return exchange(
    '127.0.0.1',
    Number(port),
    (socket) => {
      socket.write(
        requestHead('POST', '/webhooks/telnyx', [
          ['host', `127.0.0.1:${port}`],
          ['content-type', 'application/json'],
          ['content-length', String(body.length)],
          ...Object.entries(signTelnyxWebhook(keys.privateKey, Math.floor(Date.now() / 1000), body)),
        ]),
      );
      socket.write(body.subarray(0, body.length - 1024));
    },
    60_000,
  );
}

async function median(sample: () => number, n = 5): Promise<number> {
  const values: number[] = [];
  for (let i = 0; i < n; i++) {
    values.push(sample());
    await new Promise((r) => setTimeout(r, 200));
  }
  return values.sort((a, b) => a - b)[Math.floor(n / 2)]!;
}

describe.runIf(process.platform === 'linux')('a slow-body storm', () => {
  it('is held to the connection cap, cut off without a 2xx, stores nothing, and leaves memory within 20% of its baseline', async () => {
    // Warm up: the process has served webhooks before its baseline is taken.
    for (let i = 0; i < 50; i++) {
      expect((await postWebhook(`${base}/webhooks/telnyx`, keys, envelope(`warm-${i}`))).status).toBe(200);
    }
    await new Promise((r) => setTimeout(r, 1000));
    const baseline = await median(rss);

    let peak = 0;
    const sampling = setInterval(() => (peak = Math.max(peak, rss())), 250);
    const started = performance.now();
    const answers = await Promise.all(Array.from({ length: STORM }, (_, i) => staller(i)));
    clearInterval(sampling);

    const cutOff = answers.filter((a) => a.status !== null);
    const refused = answers.filter((a) => a.status === null);
    // Every one got an answer or was refused: none was still open when the test gave up.
    expect(answers.every((a) => a.closedByServer)).toBe(true);
    expect(new Set(cutOff.map((a) => a.status))).toEqual(new Set([408]));
    expect(cutOff.length).toBeLessThanOrEqual(CAP);
    expect(refused.length).toBeGreaterThanOrEqual(STORM - CAP);
    // Refused on arrival: each one closed before the first stalled sender was cut off.
    const firstCutOff = Math.min(...cutOff.map((a) => a.closedAfterMs));
    expect(refused.filter((a) => a.closedAfterMs >= firstCutOff)).toEqual([]);
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'storm-%'`)).toBe(0);

    const metrics = await (await fetch(`${base}/metrics`)).text();
    const refusedCounted = /^handset_http_connections_refused_total\{role="ingest"\} (\d+)$/m.exec(metrics);
    expect(Number(refusedCounted?.[1])).toBe(refused.length);

    // Memory back: within 20% of the baseline (measured, not assumed, in this run).
    let after = Number.POSITIVE_INFINITY;
    await eventually(
      async () => {
        after = await median(rss);
        return after <= baseline * 1.2;
      },
      60_000,
      500,
    ).catch(() => undefined);
    console.log(
      `slow-body storm: ${STORM} senders × ${DEFAULT_BODY_LIMIT - 1024} bytes, cap ${CAP}: ` +
        `${cutOff.length} cut off (408) after ${Math.round(firstCutOff)} ms, ${refused.length} refused; ` +
        `RSS baseline ${baseline.toFixed(1)} MiB, peak ${peak.toFixed(1)} MiB, after ${after.toFixed(1)} MiB ` +
        `(${Math.round(performance.now() - started)} ms after the storm began)`,
    );
    expect(after).toBeLessThanOrEqual(baseline * 1.2);

    // Still serving: a webhook after the storm is stored.
    expect((await postWebhook(`${base}/webhooks/telnyx`, keys, envelope('after-the-storm'))).json).toEqual({
      status: 'stored',
    });
    expect(served.alive()).toBe(true);
  }, 180_000);
});
