// Storms of senders that each send most of a body and then stall, against a real
// `handset serve --roles ingest` process on loopback with its default limits.
// Small bodies: the process holds at most its connection cap of them (the others
// are closed as soon as they connect) and cuts them off at its request timeout
// with a 408. Bodies as large as ingest accepts: what they hold together stays
// within the held-body budget (the bodies past it are refused with a 503 at once),
// and once V8 has collected, the process holds nothing of them: its V8 heap and its
// Buffers are as before the storm, collected the same way, in the same run, and its
// resident memory is within what the C allocator may keep of the storm's reads.
// Neither storm gets a 2xx or stores anything, and a webhook after them is stored.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signTelnyxWebhook } from '../../src/carrier/telnyx/signature.js';
import { loadConfig } from '../../src/config.js';
import { DEFAULT_HELD_BODY_BUDGET } from '../../src/ingest/body.js';
import { DEFAULT_BODY_LIMIT } from '../../src/ingest/server.js';
import { envelope, postWebhook, telnyxKeys } from '../support/carrier.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { collectGarbage, INSPECTABLE, memoryUsage } from '../support/inspector.js';
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
  served = await serveRoles('ingest', {
    DATABASE_URL: db.url,
    TELNYX_PUBLIC_KEY: keys.publicKeyBase64,
    ...INSPECTABLE,
  });
  base = served.ingestUrl!;
}, 60_000);
afterAll(async () => {
  served?.proc.child.kill('SIGKILL');
  await db.drop();
});

/** Opens a connection, sends the head and all but the last KiB of a signed body of `size` bytes, then stalls. */
function staller(i: number, size: number): Promise<RawAnswer> {
  const id = `storm-${i}`;
  const head = envelope(id, 'message.received', { text: '' });
  const body = Buffer.from(head.replace('"text":""', `"text":"${'x'.repeat(size - head.length)}"`));
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

/** Storms `senders` stallers of `size` bytes at the process, sampling its peak resident memory meanwhile. */
async function storm(senders: number, size: number, meanwhile: () => Promise<unknown> = async () => {}) {
  let peak = 0;
  const sampling = setInterval(() => (peak = Math.max(peak, rss())), 250);
  const started = performance.now();
  const storming = Promise.all(Array.from({ length: senders }, (_, i) => staller(i, size)));
  await meanwhile();
  const answers = await storming;
  clearInterval(sampling);
  // Every one got an answer or was refused: none was still open when the test gave up.
  expect(answers.every((a) => a.closedByServer)).toBe(true);
  expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id LIKE 'storm-%'`)).toBe(0);
  const of = (status: number | null) => answers.filter((a) => a.status === status);
  const firstCutOff = Math.min(...of(408).map((a) => a.closedAfterMs));
  return { answers, of, firstCutOff, peak, started };
}

/** One sample of the process's /metrics, by its exact name and labels. */
async function metric(sample: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  return Number(
    text
      .split('\n')
      .find((line) => line.startsWith(`${sample} `))
      ?.slice(sample.length + 1) ?? 0,
  );
}

describe.runIf(process.platform === 'linux')('a slow-body storm', () => {
  it('is held to the connection cap: the senders past it are closed on arrival, the rest cut off with a 408', async () => {
    const { answers, of, firstCutOff } = await storm(STORM, 4096);
    const refused = of(null);
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([408, null]));
    expect(of(408).length).toBeLessThanOrEqual(CAP);
    expect(refused.length).toBeGreaterThanOrEqual(STORM - CAP);
    // Refused on arrival: each one closed before the first stalled sender was cut off.
    expect(refused.filter((a) => a.closedAfterMs >= firstCutOff)).toEqual([]);
    expect(await metric('handset_http_connections_refused_total{role="ingest"}')).toBe(refused.length);
    expect((await postWebhook(`${base}/webhooks/telnyx`, keys, envelope('after-the-small-storm'))).json).toEqual({
      status: 'stored',
    });
  }, 60_000);

  it('holds no more than its held-body budget, refuses the bodies past it at once, and once collected holds nothing of them', async () => {
    // Warm up: the process has served webhooks before its baseline is taken.
    for (let i = 0; i < 50; i++) {
      expect((await postWebhook(`${base}/webhooks/telnyx`, keys, envelope(`warm-${i}`))).status).toBe(200);
    }
    await collectGarbage(served.proc);
    const baseline = await median(rss);
    const v8Before = await memoryUsage(served.proc);
    const sent = DEFAULT_BODY_LIMIT - 1024;

    // Below the connection cap (the test's own keep-alive connections count too): this storm is about bytes.
    const senders = CAP - 16;
    // While the budget is held, a webhook that arrives in one piece needs none of it.
    let meanwhile: unknown;
    let heldMeanwhile = 0;
    const { answers, of, firstCutOff, peak, started } = await storm(senders, DEFAULT_BODY_LIMIT, async () => {
      await new Promise((r) => setTimeout(r, 2000));
      meanwhile = (await postWebhook(`${base}/webhooks/telnyx`, keys, envelope('during-the-storm'))).json;
      heldMeanwhile = await metric('handset_ingest_held_body_bytes');
    });
    expect(meanwhile).toEqual({ status: 'stored' });
    // The gauge shows what the stalled bodies hold, within the budget, and nothing once they are cut off.
    expect(heldMeanwhile).toBeGreaterThan(DEFAULT_HELD_BODY_BUDGET / 2);
    expect(heldMeanwhile).toBeLessThanOrEqual(DEFAULT_HELD_BODY_BUDGET);
    expect(await metric('handset_ingest_held_body_bytes')).toBe(0);
    const cutOff = of(408);
    const overBudget = of(503);
    expect(answers.filter((a) => a.status !== 408 && a.status !== 503)).toEqual([]);
    // Only the bodies that fit the budget together waited for the request timeout.
    expect(cutOff.length).toBeGreaterThan(0);
    expect(cutOff.length * sent).toBeLessThanOrEqual(DEFAULT_HELD_BODY_BUDGET);
    expect(overBudget.length).toBeGreaterThanOrEqual(senders - Math.ceil(DEFAULT_HELD_BODY_BUDGET / sent));
    // Refused at once: each one closed before the first stalled sender was cut off, with a body that says retry.
    expect(overBudget.filter((a) => a.closedAfterMs >= firstCutOff)).toEqual([]);
    expect(JSON.parse(overBudget[0]!.body)).toEqual({ error: 'unavailable', detail: 'try again' });
    expect(await metric('handset_ingest_requests_total{outcome="held_bodies_full"}')).toBe(overBudget.length);

    // Nothing held once collected: the held pieces are V8 strings, which a collection
    // gives back (8 MiB of them kept would show in the V8 heap), and no Buffer outlives
    // its request.
    await collectGarbage(served.proc);
    const after = await median(rss);
    const v8After = await memoryUsage(served.proc);
    const MiB = 1024 * 1024;
    console.log(
      `slow-body storm: ${senders} senders × ${sent} bytes, budget ${DEFAULT_HELD_BODY_BUDGET} bytes: ` +
        `${overBudget.length} refused (503), ${cutOff.length} cut off (408) after ${Math.round(firstCutOff)} ms; ` +
        `RSS collected baseline ${baseline.toFixed(1)} MiB, peak ${peak.toFixed(1)} MiB, ` +
        `collected after ${after.toFixed(1)} MiB (${Math.round(performance.now() - started)} ms after the storm began); ` +
        `V8 heap used ${(v8Before.heapUsed / MiB).toFixed(1)} → ${(v8After.heapUsed / MiB).toFixed(1)} MiB, ` +
        `external and array buffers ${((v8Before.external + v8Before.arrayBuffers) / MiB).toFixed(1)} → ` +
        `${((v8After.external + v8After.arrayBuffers) / MiB).toFixed(1)} MiB`,
    );
    expect(v8After.heapUsed).toBeLessThanOrEqual(v8Before.heapUsed + 2 * MiB);
    expect(v8After.external + v8After.arrayBuffers).toBeLessThanOrEqual(
      v8Before.external + v8Before.arrayBuffers + MiB,
    );
    // Resident memory back within 20%: the C allocator may keep freed pieces of the
    // storm's socket reads where a later allocation sits above them (back to the byte
    // in most runs, 12-15% kept in 2 of about 30 here). A refused body is read no
    // further (limits.test.ts holds the read itself): reading the refused bodies only
    // to drop them kept 27-49% more.
    expect(after).toBeLessThanOrEqual(baseline * 1.2);

    // Still serving: a webhook after the storm is stored.
    expect((await postWebhook(`${base}/webhooks/telnyx`, keys, envelope('after-the-storm'))).json).toEqual({
      status: 'stored',
    });
    expect(served.alive()).toBe(true);
  }, 180_000);
});
