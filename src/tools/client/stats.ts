// Small statistics and table helpers for the client tools' reports.
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
 * Percentiles of `samples` from an HDR histogram (3 significant digits; the one estimator of the client
 * tools and benches), in units of `1 / resolution`, negatives as 0. `at(p)`, `p` in [0,100]; 0 when empty.
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
  // A bucket reads back as its top value: capped so a p99 never exceeds the max printed beside it.
  return (p) => Math.min(h.getValueAtPercentile(p), max) / resolution;
}

/** Median of an ascending array (mean of the middle two; 0 when empty); for counts, not latencies. */
export function medianOfSorted(sorted: readonly number[]): number {
  const n = sorted.length;
  if (n === 0) return 0;
  const mid = n >> 1;
  return n % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

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

export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** A box-drawn table; the first row is the header. */
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
