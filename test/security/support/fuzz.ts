// Shared knobs for the property-based security tests: how many inputs each
// property draws (scaled by HANDSET_FUZZ_SCALE for long runs), a fixed seed when
// HANDSET_FUZZ_SEED is set (to replay a failure fast-check reported), and a
// tally of inputs actually sent, printed once per file.

import type fc from 'fast-check';

const scale = Number(process.env.HANDSET_FUZZ_SCALE ?? '1') || 1;
const seed = process.env.HANDSET_FUZZ_SEED === undefined ? undefined : Number(process.env.HANDSET_FUZZ_SEED);

/** fast-check parameters for a property meant to draw `n` inputs in a normal run. */
export function runs(n: number): fc.Parameters<unknown> {
  return { numRuns: Math.max(1, Math.round(n * scale)), ...(seed !== undefined ? { seed } : {}), endOnFailure: false };
}

const tally = new Map<string, number>();

/** Counts one input sent for a property (for the summary). */
export function sent(property: string, n = 1): void {
  tally.set(property, (tally.get(property) ?? 0) + n);
}

export function tallySummary(title: string): string {
  const lines = [...tally].map(([p, n]) => `  ${String(n).padStart(6)}  ${p}`);
  const total = [...tally.values()].reduce((a, b) => a + b, 0);
  return `${title}: ${total} inputs\n${lines.join('\n')}`;
}

/** Text a response body must never contain: stack frames, SQL, internals. */
export const LEAK =
  /\bat (?:async )?[\w.<>]+ \(|node:internal|node_modules|\.ts:\d+|\.js:\d+|SELECT |INSERT |relation "|syntax error|duplicate key|violates|pg_|ECONN/;
