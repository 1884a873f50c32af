/**
 * The pool's figures (contract.md §12: pool queue depth, wait and run time, utilization): the shapes
 * {@link CpuPool.stats} returns and the HdrHistograms behind them. Times in µs.
 */
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

/**
 * Pool figures for metrics (contract.md §12). Each call ends in exactly one of completed / withdrawn / rejected /
 * failed / abandoned / unfit.
 */
export interface PoolStats {
  /** Tasks waiting for a thread (ours plus any piscina holds while it starts a thread). */
  queueSize: number;
  /** Tasks on a thread now (including abandoned ones still finishing). */
  running: number;
  /** Of `running`, large tasks (they hold at most all threads but one; pool-client.ts). */
  largeRunning: number;
  /**
   * Fraction (0..1) of the max threads busy with a task, exponentially weighted over ~5 s. (Not piscina's
   * `utilization`: in 5.3.2 it divides a mean already in ms by 1000 again and reads 1000× too low.)
   */
  utilization: number;
  /** Threads alive. */
  threads: number;
  /** Max threads: tasks that can run at once. */
  capacity: number;
  /** Tasks that may wait before a call is refused IBEX_ERR_POOL_SATURATED. */
  maxQueue: number;
  /** Calls answered with a result. */
  completed: number;
  /** Calls withdrawn before reaching a thread: deadline or caller's signal (IBEX_ERR_POOL_DEADLINE). */
  withdrawn: number;
  /** Calls refused because the queue was full (IBEX_ERR_POOL_SATURATED). */
  rejected: number;
  /** Calls whose task threw, whose thread died, or that the closing pool dropped (IBEX_ERR_POOL_TASK_FAILED). */
  failed: number;
  /**
   * Calls answered IBEX_ERR_POOL_DEADLINE while their task was running (deadline or signal); the thread
   * finished the task and its result was discarded.
   */
  abandoned: number;
  /**
   * Calls withdrawn when they reached a free thread because their caller's `fitsAt` no longer expected the
   * task to finish in time (IBEX_ERR_POOL_DEADLINE; not counted in `withdrawn`).
   */
  unfit: number;
  /** `wait_us` of completed calls. */
  waitUs: LatencySummary;
  /** Worker run time of every task that returned (including abandoned ones). */
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

/** Time constant of the utilization average, ms. */
export const UTILIZATION_TAU_MS = 5_000;

/**
 * Busy fraction of the pool's threads, exponentially weighted over {@link UTILIZATION_TAU_MS}. Call
 * {@link BusyAverage.update} with the fraction that held since the last update: as it was constant in
 * between, weighting the step by 1 − e^(−dt/τ) is exact, and the gauge does not depend on who reads it when.
 */
export class BusyAverage {
  value = 0;
  #at: number;
  /** @param now epoch ms. */
  constructor(now: number) {
    this.#at = now;
  }
  /** @param now epoch ms; @param busy fraction (0..1) busy since the last update. */
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

/** What a CpuPool counts over its calls: how each ended, wait and run times, and thread busyness. */
export class PoolCounts {
  completed = 0;
  withdrawn = 0;
  rejected = 0;
  failed = 0;
  abandoned = 0;
  unfit = 0;
  readonly waitUs = newHistogram();
  readonly runUs = newHistogram();
  /** Busy fraction of the threads, exponentially weighted (see {@link UTILIZATION_TAU_MS}). */
  readonly busy: BusyAverage;
  /** @param now epoch ms. */
  constructor(now: number) {
    this.busy = new BusyAverage(now);
  }
  /** Back to zero (after warm-up). @param now epoch ms. */
  reset(now: number): void {
    this.completed = this.withdrawn = this.rejected = this.failed = this.abandoned = this.unfit = 0;
    this.waitUs.reset();
    this.runUs.reset();
    this.busy.reset(now);
  }
}
