// The bench's inbox phase, short (`npm run bench -- --quick --only inbox`): its
// figures depend on the machine and are not judged here; what it counts is. Every
// request of each run answered 200, each event handled once, the replay all
// duplicates, and its three targets reported.

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
  out = await mkdtemp(path.join(tmpdir(), 'handset-inbox-bench-test-'));
  await promisify(execFile)(process.execPath, [BENCH, '--quick', '--only', 'inbox', '--out', out], {
    env: { PATH: process.env['PATH'], HOME: process.env['HOME'], DATABASE_URL: inject('adminUrl') },
    timeout: 150_000,
  });
  report = JSON.parse(await readFile(path.join(out, 'latest.json'), 'utf8')) as BenchReport;
}, 180_000);
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe('the bench’s inbox phase, short', () => {
  it('answers every request 200 with and without the inbox, handles each event once, and the replay is all duplicates', () => {
    const r = report.inbox!;
    for (const [name, run] of Object.entries({
      'paced, inbox': r.paced.inbox,
      'paced, plain': r.paced.plain,
      'c=32, inbox': r.concurrent.inbox,
      'c=32, plain': r.concurrent.plain,
      replay: r.concurrent.duplicates,
    })) {
      expect({ name, ok: run.statuses['200'] ?? 0, errors: run.errors }).toEqual({ name, ok: run.requests, errors: 0 });
    }
    const c = r.concurrent;
    expect({ doubled: c.doubled, unhandled: c.unhandled }).toEqual({ doubled: 0, unhandled: 0 });
    // An event the load generator sent twice reaches the plain handler twice (the inbox answers the
    // second copy `duplicate`). It happened in 2 of 5 whole-suite runs, one event each, and is not
    // yet explained: reported here so that it is seen, not held to 0, since it is not the inbox's.
    if (c.sentTwice > 0) console.log(`inbox bench: ${c.sentTwice} event(s) sent twice by the load generator`);
    expect(c.remembered).toBe(c.effects);
    // Beyond the 200s counted: only what was in flight when the warm-up and the measurement stopped.
    expect(c.effects - (c.inbox.statuses['200'] ?? 0)).toBeLessThanOrEqual(2 * c.concurrency);
  });

  it('reports its three targets, each judged', () => {
    const inbox = report.targets.filter((t) => t.target.startsWith('inbox'));
    expect(inbox.map((t) => t.target)).toEqual([
      'inbox adds ≤ 1 ms p50 at 100/s',
      'inbox adds ≤ 3 ms p99 at 100/s',
      'inbox ≥ 1,500 verified, deduplicated events/s at concurrency 32',
    ]);
    expect(inbox.every((t) => typeof t.met === 'boolean')).toBe(true);
  });
});
