/**
 * Small statistics and table helpers for the client tools' reports.
 */
import { build } from 'hdr-histogram-js';

/** Summary of a list of per-second samples (autocannon's Req/Sec row). */
export interface SampleStats {
  p1: number;
  p2_5: number;
  p50: number;
  p97_5: number;
  avg: number;
  stdev: number;
  min: number;
  max: number;
}

/**
 * Percentiles of `samples` read from an HDR histogram (hdr-histogram-js, 3 significant digits): the one
 * percentile estimator of the client tools and benches, the same the load driver and the pool use
 *. Values are recorded as integers of `1 / resolution` (default 1000: ms kept to the
 * µs), so a value is exact to 3 significant digits and never above the largest sample; negative values are
 * recorded as 0.
 * @returns `at(p)` for `p` in [0,100] in the samples' unit, 0 for every `p` when there are no samples.
 */
export function percentilesOf(samples: readonly number[], resolution = 1000): (p: number) => number {
  if (samples.length === 0) return () => 0;
  const h = build({ lowestDiscernibleValue: 1, numberOfSignificantValueDigits: 3, autoResize: true });
  let max = 0;
  for (const v of samples) {
    const units = Math.max(0, Math.round(v * resolution));
    h.recordValue(units);
    if (units > max) max = units;
  }
  // A bucket reads back as its top value: capped at the largest sample, a p99 never exceeds the max
  // printed beside it (replay printed p99 30.863 ms, max 30.848 ms).
  return (p) => Math.min(h.getValueAtPercentile(p), max) / resolution;
}

/**
 * Median of an ascending array: the mean of the two middle values for an even length; 0 when empty. For
 * counts (memories, tokens) and the budget mix's midpoints, not latencies ({@link percentilesOf}).
 */
export function medianOfSorted(sorted: readonly number[]): number {
  const n = sorted.length;
  if (n === 0) return 0;
  const mid = n >> 1;
  return n % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** {@link medianOfSorted} of `values` in any order (they are not changed). */
export function median(values: readonly number[]): number {
  return medianOfSorted([...values].sort((a, b) => a - b));
}

/** {@link SampleStats} of `samples` (population standard deviation); all zero when empty. */
export function sampleStats(samples: readonly number[]): SampleStats {
  const sorted = [...samples].sort((a, b) => a - b);
  const n = sorted.length;
  const avg = n === 0 ? 0 : sorted.reduce((s, v) => s + v, 0) / n;
  const variance = n === 0 ? 0 : sorted.reduce((s, v) => s + (v - avg) ** 2, 0) / n;
  const at = percentilesOf(sorted, 1);
  return {
    p1: at(1),
    p2_5: at(2.5),
    p50: at(50),
    p97_5: at(97.5),
    avg: round(avg, 2),
    stdev: round(Math.sqrt(variance), 2),
    min: n === 0 ? 0 : sorted[0]!,
    max: n === 0 ? 0 : sorted[n - 1]!,
  };
}

/** Rounds to `digits` decimals (reports carry ms with µs precision: 3 decimals). */
export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Renders rows as a box-drawn table; the first row is the header. Cells are left-aligned. */
export function renderTable(rows: readonly (readonly string[])[]): string {
  const cols = Math.max(0, ...rows.map((r) => r.length));
  const widths = Array.from({ length: cols }, (_, c) => Math.max(0, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (l: string, m: string, r: string) => `${l}${widths.map((w) => '─'.repeat(w + 2)).join(m)}${r}`;
  const row = (r: readonly string[]) => `│${widths.map((w, c) => ` ${(r[c] ?? '').padEnd(w)} `).join('│')}│`;
  const out = [line('┌', '┬', '┐')];
  rows.forEach((r, i) => {
    out.push(row(r));
    if (i === 0 && rows.length > 1) out.push(line('├', '┼', '┤'));
  });
  out.push(line('└', '┴', '┘'));
  return out.join('\n');
}

/** `1234567` → `1.23 MB` (decimal units, as autocannon prints). */
export function formatBytes(bytes: number): string {
  if (bytes < 1000) return `${Math.round(bytes)} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let v = bytes;
  let u = -1;
  do {
    v /= 1000;
    u++;
  } while (v >= 1000 && u < units.length - 1);
  return `${v.toFixed(2)} ${units[u]}`;
}

/** `12345` → `12k` like autocannon's totals; small numbers as they are. */
export function formatCount(n: number): string {
  return n >= 10_000 ? `${Math.round(n / 1000)}k` : String(n);
}
