// What the soak records each interval and how it judges the run from it: growth
// of each long-lived role's memory, descriptors and connections between an early
// window and the last one. Pure: samples in, verdict out.

export const FIGURES = ['rssBytes', 'heapUsedBytes', 'loopDelayP99Ms', 'openFds', 'dbConnections'] as const;
export type Figure = (typeof FIGURES)[number];
/** Judged for growth; the event-loop delay is drawn, not judged (it follows the load, not a leak). */
export const JUDGED: readonly Figure[] = ['rssBytes', 'heapUsedBytes', 'openFds', 'dbConnections'];
/** Counts, where a pool's idle timeout moves a handful either way: growth must also be this many. */
const COUNT_FLOOR: Partial<Record<Figure, number>> = { openFds: 3, dbConnections: 3 };
export const GROWTH_LIMIT = 0.1;

export const BACKLOG = ['jobsDue', 'carrierEventsUnprocessed', 'deliveriesPending', 'messagesQueued'] as const;
export type BacklogFigure = (typeof BACKLOG)[number];

export type RoleFigures = { pid: number } & Record<Figure, number | null>;

export interface Sample {
  /** Milliseconds since the load started. */
  atMs: number;
  roles: Record<string, RoleFigures>;
  backlog: Record<BacklogFigure, number>;
}

export interface Growth {
  role: string;
  figure: Figure;
  early: number;
  late: number;
  /** late / early − 1. */
  growth: number;
  failed: boolean;
}

export interface GrowthVerdict {
  /** How the two windows were chosen, as the report says it. */
  basis: string;
  early: [number, number];
  late: [number, number];
  growth: Growth[];
  failures: string[];
}

const MINUTE = 60_000;

/**
 * Runs of 20 minutes or more: the 10th minute against the last, each the median of
 * the samples within a minute of it (three, a minute apart), so one garbage
 * collection does not decide. Shorter runs have no settled 10th minute: their first
 * quarter (after the start) against their last.
 *
 * Heap used is the exception: what a leak raises is the live set, the floor the
 * heap falls back to at a full collection, and a process that allocates little
 * collects in full only every 20 minutes or so (the hour of 2026-12-07: ingest's
 * heap climbed 26 → 33 MB and fell back to 26 twice, at minutes 16 and 37). So the
 * heap's lowest sample of the first half after the 10th minute is set against the
 * lowest of the second half (a short run: its first quarter's against its last's).
 */
export function judgeGrowth(samples: readonly Sample[], durationMs: number, roles: readonly string[]): GrowthVerdict {
  const long = durationMs >= 20 * MINUTE;
  const early: [number, number] = long ? [9 * MINUTE, 11 * MINUTE] : [1, durationMs / 4];
  const late: [number, number] = long ? [durationMs - 2 * MINUTE, Infinity] : [(durationMs * 3) / 4, Infinity];
  const half = (10 * MINUTE + durationMs) / 2;
  const floors: { early: [number, number]; late: [number, number] } = long
    ? { early: [10 * MINUTE, half], late: [half, Infinity] }
    : { early, late };
  const basis = long
    ? 'the 10th minute against the last (medians of the samples within a minute of each); heap used, the lowest of each half after the 10th minute'
    : `first quarter against last quarter (a run under 20 minutes has no settled 10th minute); heap used, the lowest of each`;
  const growth: Growth[] = [];
  const failures: string[] = [];
  for (const role of roles) {
    for (const figure of JUDGED) {
      const [e, l] =
        figure === 'heapUsedBytes'
          ? [lowest(samples, floors.early, role, figure), lowest(samples, floors.late, role, figure)]
          : [median(samples, early, role, figure), median(samples, late, role, figure)];
      if (e === null || l === null) continue;
      const g = e > 0 ? l / e - 1 : 0;
      const failed = g > GROWTH_LIMIT && l - e >= (COUNT_FLOOR[figure] ?? 0);
      growth.push({ role, figure, early: e, late: l, growth: g, failed });
      if (failed)
        failures.push(`${role} ${figure} grew ${(g * 100).toFixed(1)}% (${show(figure, e)} → ${show(figure, l)})`);
    }
  }
  if (growth.length === 0) failures.push('too few samples to judge growth');
  return { basis, early, late, growth, failures };
}

function within(samples: readonly Sample[], [from, to]: [number, number], role: string, figure: Figure): number[] {
  return samples
    .filter((s) => s.atMs >= from && s.atMs <= to)
    .map((s) => s.roles[role]?.[figure])
    .filter((v): v is number => typeof v === 'number')
    .sort((a, b) => a - b);
}

function lowest(samples: readonly Sample[], window: [number, number], role: string, figure: Figure) {
  return within(samples, window, role, figure)[0] ?? null;
}

function median(samples: readonly Sample[], window: [number, number], role: string, figure: Figure) {
  const values = within(samples, window, role, figure);
  if (values.length === 0) return null;
  const mid = Math.floor(values.length / 2);
  return values.length % 2 ? values[mid]! : (values[mid - 1]! + values[mid]!) / 2;
}

export function show(figure: Figure, v: number): string {
  if (figure === 'rssBytes' || figure === 'heapUsedBytes') return `${(v / 2 ** 20).toFixed(1)} MB`;
  if (figure === 'loopDelayP99Ms') return `${v.toFixed(1)} ms`;
  return String(Math.round(v * 10) / 10);
}
