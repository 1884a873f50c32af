/**
 * Parses and summarises the log of bench/internal/external-memory-preload.ts (to see where the p99 comes
 * from): between two main-thread mark-compacts, how fast ArrayBuffer and external memory grew and how
 * much scavenges gave back. V8 starts a mark-compact when external memory has grown by 64 MB since the
 * last one ("external memory pressure"), so that growth rate sets how often the event loop pays for one.
 */

import { medianOfSorted, round } from '../../../src/tools/client/stats.js';

/** One line of the preload's log: a memory sample (MB) or a GC (perf_hooks kind, ms). */
export type MemoryLogEvent = MemorySample | GcEvent;
/** A memory sample of the preload's log, MB. */
type MemorySample = {
  type: 'mem';
  at: number;
  arrayBuffersMb: number;
  externalMb: number;
  heapUsedMb: number;
};
/** A GC of the preload's log: perf_hooks kind, pause ms. */
type GcEvent = { type: 'gc'; at: number; kind: number; ms: number };

/** perf_hooks GC kinds (NODE_PERFORMANCE_GC_*). */
export const GC_MINOR = 1;
export const GC_MAJOR = 4;

/** A log line as an event; null for anything else. */
export function parseMemoryLine(line: string): MemoryLogEvent | null {
  const f = line.trim().split(' ');
  const n = f.slice(1).map(Number);
  if (n.some((x) => !Number.isFinite(x))) return null;
  if (f[0] === 'mem' && n.length === 4)
    return { type: 'mem', at: n[0]!, arrayBuffersMb: n[1]!, externalMb: n[2]!, heapUsedMb: n[3]! };
  if (f[0] === 'gc' && n.length === 3) return { type: 'gc', at: n[0]!, kind: n[1]!, ms: n[2]! };
  return null;
}

/** {@link summariseMemoryLog}'s figures; rates in MB/s, medians over the intervals between mark-compacts. */
export interface MemoryLogSummary {
  /** Main-thread mark-compacts after `afterMs`. */
  mark_compacts: number;
  /** Median time between consecutive ones, s; null for fewer than two. */
  period_s: number | null;
  /** Median mark-compact pause, ms; null for none. */
  pause_ms: number | null;
  /** Intervals between consecutive mark-compacts with at least two memory samples (the medians' count). */
  intervals: number;
  /** ArrayBuffer memory's growth from the interval's lowest sample to its last, MB/s. */
  array_buffers_mb_per_s: number | null;
  /** External memory's (ArrayBuffers included) growth, MB/s. */
  external_mb_per_s: number | null;
  /** The largest fall of ArrayBuffer memory across one scavenge of an interval, MB. */
  array_buffers_freed_by_a_scavenge_mb: number | null;
}

/** Median, null when empty (rates and pauses here are counts of a few intervals, not latencies). */
function median(xs: readonly number[]): number | null {
  return xs.length === 0 ? null : medianOfSorted([...xs].sort((a, b) => a - b));
}

const r2 = (x: number | null) => (x === null ? null : round(x, 2));

/**
 * @param events the log's events in time order (the preload writes them so).
 * @param afterMs events before this (start-up, warm-up) are left out, ms since the preload ran.
 */
export function summariseMemoryLog(events: readonly MemoryLogEvent[], afterMs = 0): MemoryLogSummary {
  const later = events.filter((e) => e.at >= afterMs);
  const majors = later.filter((e): e is GcEvent => e.type === 'gc' && e.kind === GC_MAJOR);
  const abRates: number[] = [];
  const extRates: number[] = [];
  let freed: number | null = null;
  for (let i = 1; i < majors.length; i++) {
    const from = majors[i - 1]!.at;
    const to = majors[i]!.at;
    // Samples strictly between the two collections: the first is taken after the earlier one freed.
    const inside = later.filter((e) => e.at > from && e.at < to);
    const mem = inside.filter((e): e is MemorySample => e.type === 'mem');
    if (mem.length < 2) continue;
    // From the interval's low point: V8 frees the dead buffers a few ms after the collection's start,
    // so the first samples after it may still hold them.
    const b = mem[mem.length - 1]!;
    const rate = (value: (m: (typeof mem)[number]) => number): number | null => {
      const low = mem.reduce((lo, m) => (value(m) < value(lo) ? m : lo));
      const seconds = (b.at - low.at) / 1000;
      return seconds > 0 ? (value(b) - value(low)) / seconds : null;
    };
    const ab = rate((m) => m.arrayBuffersMb);
    const ext = rate((m) => m.externalMb);
    if (ab === null || ext === null) continue;
    abRates.push(ab);
    extRates.push(ext);
    for (const gc of inside) {
      if (gc.type !== 'gc' || gc.kind !== GC_MINOR) continue;
      const before = mem.findLast((m) => m.at <= gc.at);
      const after = mem.find((m) => m.at > gc.at);
      if (before === undefined || after === undefined) continue;
      const fall = Math.max(0, before.arrayBuffersMb - after.arrayBuffersMb);
      freed = Math.max(freed ?? 0, fall);
    }
  }
  const periods = majors.slice(1).map((m, i) => (m.at - majors[i]!.at) / 1000);
  return {
    mark_compacts: majors.length,
    period_s: r2(median(periods)),
    pause_ms: r2(median(majors.map((m) => m.ms))),
    intervals: abRates.length,
    array_buffers_mb_per_s: r2(median(abRates)),
    external_mb_per_s: r2(median(extRates)),
    array_buffers_freed_by_a_scavenge_mb: r2(freed),
  };
}
