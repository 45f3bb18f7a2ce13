// Latency samples and the few numbers the bench reports about them. Every
// figure, ours and its baseline, goes through the same recorder, so a p99 here
// and a p99 there were computed the same way (exact, from every sample; no
// histogram buckets).

export interface LatencySummary {
  count: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/** Milliseconds, as floats; grows without copying per sample. */
export class Latencies {
  private chunks: Float64Array[] = [];
  private current = new Float64Array(16_384);
  private used = 0;

  record(ms: number): void {
    if (this.used === this.current.length) {
      this.chunks.push(this.current);
      this.current = new Float64Array(this.current.length * 2);
      this.used = 0;
    }
    this.current[this.used++] = ms;
  }

  get count(): number {
    return this.chunks.reduce((n, c) => n + c.length, 0) + this.used;
  }

  summary(): LatencySummary {
    const all = new Float64Array(this.count);
    let at = 0;
    for (const c of this.chunks) {
      all.set(c, at);
      at += c.length;
    }
    all.set(this.current.subarray(0, this.used), at);
    return summarize(all);
  }
}

export function summarize(samples: Float64Array | number[]): LatencySummary {
  const sorted = Float64Array.from(samples).sort();
  const n = sorted.length;
  if (n === 0) return { count: 0, p50: NaN, p99: NaN, p999: NaN, max: NaN, mean: NaN };
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    count: n,
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    p999: quantile(sorted, 0.999),
    max: sorted[n - 1]!,
    mean: sum / n,
  };
}

/** Nearest-rank quantile of sorted samples. */
function quantile(sorted: Float64Array, q: number): number {
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[rank - 1]!;
}

export const round = (v: number, digits = 2): number => (Number.isFinite(v) ? Number(v.toFixed(digits)) : v);
