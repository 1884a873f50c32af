/** The pool's figures (contract.md §12) and the HdrHistograms behind them. Times in µs. */
import { build as buildHistogram, type Histogram } from 'hdr-histogram-js';

/** Distribution of one timing, µs. */
export interface LatencySummary {
  count: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Pool figures for metrics; each call ends in exactly one of the six outcome counts. */
export interface PoolStats {
  /** Waiting for a thread. */
  queueSize: number;
  /** On a thread now, abandoned ones included. */
  running: number;
  /** Of `running`, large tasks (at most all threads but one) */
  largeRunning: number;
  /** Busy fraction (0..1) over ~5 s; not piscina's, which in 5.3.2 divides a mean in ms by 1000 again. */
  utilization: number;
  /** Alive. */
  threads: number;
  /** Max threads. */
  capacity: number;
  /** Waiting tasks before IBEX_ERR_POOL_SATURATED. */
  maxQueue: number;
  completed: number;
  /** Before reaching a thread: deadline or caller's signal. */
  withdrawn: number;
  /** Queue full. */
  rejected: number;
  /** Task threw, thread died, or the closing pool dropped it. */
  failed: number;
  /** Answered POOL_DEADLINE while running; the result was discarded. */
  abandoned: number;
  /** Withdrawn at a free thread because `fitsAt` said no. */
  unfit: number;
  /** Of completed calls. */
  waitUs: LatencySummary;
  /** Every task that returned, abandoned ones included. */
  runUs: LatencySummary;
}

/** An HdrHistogram for µs timings from 1 µs to 60 s, 3 significant digits. */
export function newHistogram(): Histogram {
  return buildHistogram({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 60_000_000,
    numberOfSignificantValueDigits: 3,
  });
}

export function summarize(h: Histogram): LatencySummary {
  const count = h.totalCount;
  if (count === 0) return { count: 0, mean: 0, p50: 0, p90: 0, p99: 0, max: 0 };
  return {
    count,
    mean: h.mean,
    p50: h.getValueAtPercentile(50),
    p90: h.getValueAtPercentile(90),
    p99: h.getValueAtPercentile(99),
    max: h.maxValue,
  };
}

export const UTILIZATION_TAU_MS = 5_000;

/** Busy fraction of the threads, exponentially weighted (exact: the fraction held since the last update). */
export class BusyAverage {
  value = 0;
  #at: number;
  constructor(now: number) {
    this.#at = now;
  }
  update(now: number, busy: number): void {
    const weight = 1 - Math.exp(-(now - this.#at) / UTILIZATION_TAU_MS);
    this.value += (busy - this.value) * weight;
    this.#at = now;
  }
  reset(now: number): void {
    this.value = 0;
    this.#at = now;
  }
}

/** How a CpuPool's calls ended, their wait and run times, and thread busyness. */
export class PoolCounts {
  completed = 0;
  withdrawn = 0;
  rejected = 0;
  failed = 0;
  abandoned = 0;
  unfit = 0;
  readonly waitUs = newHistogram();
  readonly runUs = newHistogram();
  readonly busy: BusyAverage;
  constructor(now: number) {
    this.busy = new BusyAverage(now);
  }
  reset(now: number): void {
    this.completed = this.withdrawn = this.rejected = this.failed = this.abandoned = this.unfit = 0;
    this.waitUs.reset();
    this.runUs.reset();
    this.busy.reset(now);
  }
}
