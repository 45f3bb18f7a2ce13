// The bench, short (`npm run bench -- --quick --only pipeline,delivery,bulk`): real
// roles as processes, signed receipts with duplicates, customer webhooks verified at
// a receiver. Its figures depend on the machine and are not judged here; what it
// counts is: every message's webhook arrives once, and every figure is reported.
// And the order of what it times: a step measured on two clocks can come out negative.

import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { BenchReport } from '../../src/tools/bench/report.js';

const BENCH = fileURLToPath(new URL('../../dist/tools/bench/main.js', import.meta.url));

let out: string;
let report: BenchReport;
beforeAll(async () => {
  out = await mkdtemp(path.join(tmpdir(), 'handset-bench-test-'));
  await promisify(execFile)(
    process.execPath,
    [
      BENCH,
      '--quick',
      '--only',
      'pipeline,delivery,bulk',
      '--deliveries',
      '200',
      '--bulk',
      '20',
      '--bulk-paced',
      '0',
      '--out',
      out,
    ],
    // A fresh database on the tests' server, dropped afterwards.
    {
      env: { PATH: process.env['PATH'], HOME: process.env['HOME'], DATABASE_URL: inject('adminUrl') },
      timeout: 150_000,
    },
  );
  report = JSON.parse(await readFile(path.join(out, 'latest.json'), 'utf8')) as BenchReport;
}, 180_000);
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe('a short bench run', () => {
  it('gets each message’s customer webhook to the receiver once, in every pipeline run', () => {
    const p = report.pipeline!;
    for (const [name, run] of Object.entries({
      sustained: p.sustained,
      paced: p.paced,
      half: p.half!,
      neighbour: p.neighbour!,
    })) {
      expect({ name, extra: run.extraWebhooks, failures: run.failures }).toEqual({ name, extra: 0, failures: 0 });
      expect({ name, delivered: run.deliveredInDb }).toEqual({ name, delivered: run.messages });
      expect(run.duplicates, `${name}: the replays were answered as duplicates`).toBeGreaterThan(0);
    }
    // Half the sustained rate is what the half run was offered (receipts are twice the messages).
    expect(p.half!.offered).toBe(2 * Math.max(5, Math.round(p.sustained.messagesPerSecond / 2)));
  });

  it('times each pipeline run’s three legs for every message it timed end to end', () => {
    const p = report.pipeline!;
    for (const [name, run] of Object.entries({ sustained: p.sustained, paced: p.paced, half: p.half! })) {
      const legs = run.stages;
      expect({
        name,
        counts: [legs.storedToClaimed, legs.claimedToSent, legs.sentToVerified].map((l) => l.count),
      }).toEqual({ name, counts: Array(3).fill(run.latency.count) });
    }
  });

  it('delivers to one and to eight endpoints, every webhook verified, and judges each figure it has a target for', () => {
    expect(report.delivery.map((d) => [d.endpoints, d.events, d.rejected])).toEqual([
      [1, 50, 0],
      [8, 200, 0],
    ]);
    expect(report.delivery.every((d) => d.rate > 0)).toBe(true);
    const judged = report.targets.map((t) => t.target);
    for (const figure of ['pipeline sustains', 'at half the sustained rate', 'delivery to 1 endpoint', 'delivery to 8'])
      expect(
        judged.some((t) => t.includes(figure)),
        figure,
      ).toBe(true);
    expect(report.notes.filter((n) => /beyond one|delivered in the database|failed verification/.test(n))).toEqual([]);
  });

  it('times a campaign on one clock: each step ends after it starts, the customer’s webhook after its receipt', () => {
    const k = report.bulk!;
    expect([k.messages, k.extraEvents, k.refusedCreates]).toEqual([20, 0, 0]);
    // The simulator states its times on a timeline 1/timeScale as fast as the wall clock:
    // measured from those, the customer's webhook seemed to come before the delivery.
    const { bystanderDispatched, ...campaign } = k.steps;
    for (const [step, l] of Object.entries(campaign))
      expect({ step, count: l.count, ordered: l.p50 >= 0 }).toEqual({ step, count: 20, ordered: true });
    // Another account sent meanwhile, and its messages were timed too.
    expect(bystanderDispatched.count).toBeGreaterThan(0);
    expect(bystanderDispatched.p50).toBeGreaterThanOrEqual(0);
    expect(k.steps.deliveredToWebhook.p50).toBeGreaterThan(0);
    // The carrier ran as `handset sim`, a process of its own, and its CPU was weighed apart.
    expect(k.carrierCores).toBeGreaterThan(0);
  });
});
