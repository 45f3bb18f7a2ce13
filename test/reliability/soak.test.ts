// The soak (`npm run soak`, an hour on the bench machine) is judged by its
// samples: growth beyond 10% of a long-lived role's memory, descriptors or
// connections fails it, and so do stuck work and audit violations. Here: that
// judgement on made-up samples, the picture it draws, and a 20-second run of the
// real thing (from the build, as `npm run soak` runs it) with a worker SIGKILLed
// and the database cut, sampled throughout and drained to nothing stuck.

import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { writeHeapSnapshot } from 'node:v8';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { describe, expect, it } from 'vitest';
import { compare, summarize } from '../../src/tools/soak/heap-diff.js';
import { FIGURES, judgeGrowth, type RoleFigures, type Sample } from '../../src/tools/soak/samples.js';
import { renderSvg } from '../../src/tools/soak/svg.js';
import { createLogger } from '../../src/telemetry/log.js';

const { runSoak, soakSchedule, SOAK_ROLES, JUDGED_ROLES } = (await import(
  '../../dist/tools/soak/soak.js' as string
)) as typeof import('../../src/tools/soak/soak.js');

const MINUTE = 60_000;
const ROLES = ['api', 'worker'];

/** A sample a minute; the worker's RSS follows `rss(minute)` in MB, everything else stays flat. */
function run(minutes: number, rss: (minute: number) => number): Sample[] {
  const figures = (over: Partial<RoleFigures>): RoleFigures => ({
    pid: 1,
    rssBytes: 100 * 2 ** 20,
    heapUsedBytes: 40 * 2 ** 20,
    loopDelayP99Ms: 12,
    openFds: 40,
    dbConnections: 10,
    ...over,
  });
  return Array.from({ length: minutes + 1 }, (_, m) => ({
    atMs: m * MINUTE,
    roles: { api: figures({}), worker: figures({ rssBytes: rss(m) * 2 ** 20 }) },
    backlog: { jobsDue: 0, carrierEventsUnprocessed: m % 3, deliveriesPending: 0, messagesQueued: 0 },
  }));
}

describe('soak judgement', () => {
  it('a worker whose RSS grows 15% between the 10th and the 60th minute fails the hour, naming role and figure', () => {
    const verdict = judgeGrowth(
      run(60, (m) => (m < 9 ? 80 + 2 * m : m < 12 ? 100 : Math.min(115, 100 + (15 * (m - 11)) / 47))),
      60 * MINUTE,
      ROLES,
    );
    expect(verdict.basis).toMatch(/10th minute/);
    expect(verdict.failures).toEqual(['worker rssBytes grew 15.0% (100.0 MB → 115.0 MB)']);
    expect(verdict.growth.filter((g) => g.failed)).toHaveLength(1);
  });

  it('growth in the first ten minutes, then 8%, passes: warm-up is not a leak', () => {
    const verdict = judgeGrowth(
      run(60, (m) => (m < 10 ? 50 + 5 * m : 100 + (8 * (m - 10)) / 50)),
      60 * MINUTE,
      ROLES,
    );
    expect(verdict.failures).toEqual([]);
    expect(verdict.growth).toHaveLength(ROLES.length * 4);
  });

  it('one sample at a garbage collection’s peak does not decide: each end is a median of three', () => {
    const verdict = judgeGrowth(
      run(60, (m) => (m === 60 ? 130 : 100)),
      60 * MINUTE,
      ROLES,
    );
    expect(verdict.failures).toEqual([]);
  });

  it('two more connections on ten is a pool’s idle timeout, not a leak; five more is', () => {
    const withConnections = (last: number) =>
      run(60, () => 100).map((s) =>
        s.atMs >= 58 * MINUTE ? { ...s, roles: { ...s.roles, api: { ...s.roles.api!, dbConnections: last } } } : s,
      );
    expect(judgeGrowth(withConnections(12), 60 * MINUTE, ROLES).failures).toEqual([]);
    expect(judgeGrowth(withConnections(15), 60 * MINUTE, ROLES).failures).toEqual([
      'api dbConnections grew 50.0% (10 → 15)',
    ]);
  });

  it('a heap that climbs between full collections and falls back to its floor passes; a floor that rises fails', () => {
    // The hour of 2026-12-07, ingest: 26 → 33 MB over about 21 minutes, back to 26 at each full collection.
    const sawtooth = (floorRise: number) =>
      run(60, () => 100).map((s) => {
        const m = s.atMs / MINUTE;
        const mb = 26 + ((m - 16 + 21) % 21) / 3 + (floorRise * m) / 60;
        return { ...s, roles: { ...s.roles, api: { ...s.roles.api!, heapUsedBytes: mb * 2 ** 20 } } };
      });
    // Medians at two minutes would read the tooth's phase there, not a leak.
    expect(judgeGrowth(sawtooth(0), 60 * MINUTE, ROLES).failures).toEqual([]);
    expect(judgeGrowth(sawtooth(12), 60 * MINUTE, ROLES).failures).toEqual([
      'api heapUsedBytes grew 14.4% (29.2 MB → 33.4 MB)',
    ]);
  });

  it('a run under 20 minutes compares its first quarter with its last, and says so', () => {
    const verdict = judgeGrowth(
      run(8, (m) => 100 + 5 * m),
      8 * MINUTE,
      ROLES,
    );
    expect(verdict.basis).toMatch(/first quarter against last quarter/);
    // First quarter: minutes 1–2 (median 107.5); last: 6–8 (median 135).
    expect(verdict.failures).toEqual(['worker rssBytes grew 25.6% (107.5 MB → 135.0 MB)']);
  });

  it('the picture has a panel per figure and the backlog, a line per role in each', () => {
    const svg = renderSvg(
      run(60, (m) => 100 + m),
      ROLES,
      'soak <test>',
    );
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.match(/<polyline /g)).toHaveLength(FIGURES.length * ROLES.length + 4);
    expect(svg).toContain('soak &lt;test>');
    for (const title of ['RSS, MB', 'heap used, MB', 'event-loop delay p99, ms', 'open file descriptors'])
      expect(svg).toContain(title);
  });

  it('the schedule keeps an hour at a kill every 5 minutes and a cut every 10, and scales a short run', () => {
    expect(soakSchedule(60 * MINUTE)).toEqual({
      killEveryMs: 5 * MINUTE,
      cutEveryMs: 10 * MINUTE,
      cutMs: 5_000,
      sampleEveryMs: MINUTE,
    });
    expect(soakSchedule(20_000)).toEqual({
      killEveryMs: 4_000,
      cutEveryMs: 10_000,
      cutMs: 500,
      sampleEveryMs: 2_000,
    });
  });
});

describe('heap diff', () => {
  it('names what grew between two snapshots: ten thousand more of a class, counted and weighed', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'handset-heap-diff-'));
    try {
      class LeakedInTest {
        constructor(readonly n: number) {}
      }
      const kept: LeakedInTest[] = [];
      const early = writeHeapSnapshot(path.join(dir, 'early.heapsnapshot'));
      for (let i = 0; i < 10_000; i++) kept.push(new LeakedInTest(i));
      const late = writeHeapSnapshot(path.join(dir, 'late.heapsnapshot'));
      const read = async (f: string) => summarize(JSON.parse(await readFile(f, 'utf8')));
      const grown = compare(await read(early), await read(late));
      const leak = grown.find((g) => g.group === 'LeakedInTest')!;
      expect(leak.late.count - leak.early.count).toBe(kept.length);
      expect(grown.slice(0, 3).map((g) => g.group)).toContain('LeakedInTest');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('soak, 20 seconds of the real thing', () => {
  it('every role sampled throughout, a worker killed and the database cut, and after the drain nothing stuck and the audit clean', async () => {
    const lines: string[] = [];
    const durationMs = 20_000;
    const result = await runSoak({
      durationMs,
      rate: 8,
      schedule: soakSchedule(durationMs),
      drainMs: 90_000,
      databaseUrl: inject('adminUrl'),
      seed: `test-${Date.now()}`,
      log: createLogger('silent'),
      out: (l) => lines.push(l),
    });
    const report = `${lines.join('\n')}\n${JSON.stringify(result.counts)}\n${result.failures.join('\n')}`;
    expect(result.stuck, report).toBe('');
    expect(result.audit.ok, report).toBe(true);
    expect(result.exits, report).toEqual([]);
    expect(result.counts.apiFailures, report).toBe(0);
    expect(result.counts.kills, report).toBeGreaterThan(0);
    expect(result.counts.cuts, report).toBeGreaterThan(0);
    expect(result.counts.messages, report).toBeGreaterThan(0);
    for (const kind of ['healthy', 'slow', 'failing'])
      expect(result.counts.endpointRequests[kind], report).toBeGreaterThan(0);
    // A sample at the start and one per tenth of the run (the last may be late on a loaded machine).
    expect(result.samples.length, report).toBeGreaterThanOrEqual(10);
    // Every long-lived role's figures, read from the kernel and its own /metrics or its probe, in every
    // sample; its connections once the load runs (a pool opens them as it needs them).
    const last = result.samples.at(-1)!;
    for (const role of JUDGED_ROLES) {
      for (const s of result.samples)
        for (const figure of ['rssBytes', 'heapUsedBytes', 'loopDelayP99Ms', 'openFds'] as const)
          expect(s.roles[role]?.[figure], `${role} ${figure} at ${s.atMs} ms\n${report}`).toBeGreaterThan(0);
      expect(last.roles[role]?.dbConnections, `${role} connections\n${report}`).toBeGreaterThan(0);
    }
    expect(Object.keys(result.samples[0]!.roles).sort()).toEqual([...SOAK_ROLES].sort());
    // Growth is judged (a 20-second run is all warm-up, so the verdict itself is not held here).
    expect(result.growth.growth).toHaveLength(JUDGED_ROLES.length * 4);
  }, 240_000);
});
