/**
 * Figures as the benchmark page reports them: a median over repeated runs
 * with the runs' minimum and maximum, and percentiles of latency samples.
 */

/** A figure over repeated runs: median with the min-max of the runs. */
export interface Stat {
  median: number;
  min: number;
  max: number;
  /** The runs, in the order they were measured. */
  runs: number[];
}

export function stat(runs: number[]): Stat {
  if (runs.length === 0) throw new Error('a figure needs at least one run');
  const sorted = [...runs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const median = sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { median, min: sorted[0]!, max: sorted[sorted.length - 1]!, runs };
}

/** The p-th percentile (nearest rank) of `samples`. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) throw new Error('no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** Element-wise ratios of two series measured side by side (round i of each). */
export function ratios(numerators: number[], denominators: number[]): number[] {
  if (numerators.length !== denominators.length) throw new Error('series of different lengths');
  return numerators.map((n, i) => n / denominators[i]!);
}

/** Points of an empirical CDF (at most `points` of them), for charts. */
export function cdf(samples: number[], points = 200): { value: number; percentile: number }[] {
  const sorted = [...samples].sort((a, b) => a - b);
  const step = Math.max(1, Math.floor(sorted.length / points));
  const out: { value: number; percentile: number }[] = [];
  for (let i = 0; i < sorted.length; i += step) {
    out.push({ value: sorted[i]!, percentile: ((i + 1) / sorted.length) * 100 });
  }
  const last = sorted[sorted.length - 1];
  if (last !== undefined) out.push({ value: last, percentile: 100 });
  return out;
}

/** Runs `task` `n` times with at most `c` at once; resolves with the elapsed ms. */
export async function pool(
  n: number,
  c: number,
  task: (i: number) => Promise<void>,
): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(c, n) }, async () => {
      while (next < n) await task(next++);
    }),
  );
  return performance.now() - started;
}
