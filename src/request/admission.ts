/**
 * Admission at arrival (contract.md §10, amended): an adaptive concurrency limit in the manner of Netflix's
 * concurrency-limits `VegasLimit` (https://github.com/Netflix/concurrency-limits), windowed as its
 * `WindowedLimit`. A call past the limit is not queued: the caller answers it at once with the cheap
 * degraded answer (L2, reason `shed`), so no call waits past its deadline behind others.
 *
 * The latency the limit follows is the call's own-resource time — from the end of retrieval to its answer
 * (rank, the CPU stage's queue wait + run + return, the answer) — not the retrieval's: a slow dependency
 * makes calls longer without loading this process, and must not shed them. Per window (≥ `minSamples`
 * samples and ≥ `windowMs`), the median sample is compared with the no-load latency (the smallest window
 * median seen since the last reset): the estimated queue is `limit × (1 − noLoad / median)`. A short
 * queue grows the limit, a long one shrinks it; a window with a drop (an admitted call that lost its CPU
 * stage to the pool, or missed its deadline) shrinks it by `backoff`. A window in which fewer than half
 * the limit were ever in flight does not grow it (the load, not the limit, decided the latency).
 *
 * All work is O(1) per call plus a sort of ≤ `maxSamples` numbers per window: bounded by counts.
 */

/** Tuning of {@link AdaptiveConcurrencyLimit}; every field optional. */
export interface AdmissionOptions {
  /**
   * Limit at start, calls. Default `maxLimit`: a process starts open, as the fixed cap it replaces did,
   * and the limit comes down on evidence (queueing, drops).
   */
  initialLimit?: number;
  /** Floor of the limit, calls. Default 4: a few calls always get the full assembly. */
  minLimit?: number;
  /** Ceiling of the limit, calls (IBEX_CONTEXT_MAX_IN_FLIGHT). Default 128. */
  maxLimit?: number;
  /** Share of a window's new limit mixed into the current one, 0 < s ≤ 1. Default 0.5. */
  smoothing?: number;
  /** Multiplier of the limit after a window with a drop. Default 0.9. */
  backoff?: number;
  /** Shortest window, ms. Default 50. */
  windowMs?: number;
  /** Fewest samples that close a window. Default 10. */
  minSamples?: number;
  /** Samples that close a window whatever its age. Default 200. */
  maxSamples?: number;
  /** Windows after which the no-load latency is measured afresh (it may have fallen or risen). Default 200. */
  resetWindows?: number;
  /**
   * Latency below which no queue is read, ms. Default 2: own-stage latencies are sub-millisecond at no
   * load, where a thread hop or a timer tick would read as a queue of most of the limit.
   */
  noiseFloorMs?: number;
  /** Clock, ms (monotonic). Default `performance.now`. */
  now?: () => number;
}

/** A snapshot of the limiter, for metrics and tests. */
export interface AdmissionState {
  /** Current limit, calls (fractional; admission compares in-flight with its floor). */
  limit: number;
  inFlight: number;
  /** Calls refused at arrival since start. */
  sheds: number;
  /** No-load latency, ms (`Infinity` until the first window closes). */
  noLoadMs: number;
}

/** What one admitted call reports when it ends. */
export interface AdmissionSample {
  /** Own-resource latency, ms (see the module comment); ignored when `dropped`. */
  latencyMs: number;
  /** The call lost its CPU stage to the pool (deadline, saturation) or missed its deadline. */
  dropped: boolean;
}

/** The adaptive limit; one per process, used from the event loop only. */
export class AdaptiveConcurrencyLimit {
  private limitValue: number;
  private inFlightValue = 0;
  private shedCount = 0;
  private noLoad = Number.POSITIVE_INFINITY;
  private readonly samples: number[] = [];
  private windowStart: number;
  private windowDropped = false;
  private windowMaxInFlight = 0;
  private windowsSinceReset = 0;
  private readonly o: Required<Omit<AdmissionOptions, 'now'>>;
  private readonly now: () => number;

  constructor(options: AdmissionOptions = {}) {
    const maxLimit = Math.max(1, options.maxLimit ?? 128);
    const minLimit = Math.min(maxLimit, Math.max(1, options.minLimit ?? 4));
    this.o = {
      initialLimit: Math.min(maxLimit, Math.max(minLimit, options.initialLimit ?? maxLimit)),
      minLimit,
      maxLimit,
      smoothing: Math.min(1, Math.max(0.01, options.smoothing ?? 0.5)),
      backoff: Math.min(0.99, Math.max(0.1, options.backoff ?? 0.9)),
      windowMs: Math.max(0, options.windowMs ?? 50),
      minSamples: Math.max(1, options.minSamples ?? 10),
      maxSamples: Math.max(1, options.maxSamples ?? 200),
      resetWindows: Math.max(1, options.resetWindows ?? 200),
      noiseFloorMs: Math.max(0, options.noiseFloorMs ?? 2),
    };
    this.now = options.now ?? (() => performance.now());
    this.limitValue = this.o.initialLimit;
    this.windowStart = this.now();
  }

  /**
   * Decides one arriving call: admitted (in-flight + 1; the caller must {@link release} it exactly once)
   * or shed (counted; nothing to release).
   * @returns true when admitted.
   */
  tryAcquire(): boolean {
    if (this.inFlightValue >= Math.floor(this.limitValue)) {
      this.shedCount++;
      return false;
    }
    this.inFlightValue++;
    if (this.inFlightValue > this.windowMaxInFlight) this.windowMaxInFlight = this.inFlightValue;
    return true;
  }

  /**
   * Ends an admitted call. `sample` null: the call taught nothing (it ended before its own stages,
   * e.g. a refused or cancelled call).
   */
  release(sample: AdmissionSample | null): void {
    this.inFlightValue = Math.max(0, this.inFlightValue - 1);
    if (sample === null) return;
    if (sample.dropped) this.windowDropped = true;
    else if (sample.latencyMs >= 0 && Number.isFinite(sample.latencyMs)) this.samples.push(sample.latencyMs);
    const age = this.now() - this.windowStart;
    const count = this.samples.length;
    if (
      count >= this.o.maxSamples ||
      (age >= this.o.windowMs && (count >= this.o.minSamples || this.windowDropped))
    )
      this.closeWindow();
  }

  /** The limiter's current figures. */
  state(): AdmissionState {
    return {
      limit: this.limitValue,
      inFlight: this.inFlightValue,
      sheds: this.shedCount,
      noLoadMs: this.noLoad,
    };
  }

  private closeWindow(): void {
    const limit = this.limitValue;
    let next = limit;
    if (this.windowDropped) {
      next = limit * this.o.backoff;
    } else if (this.samples.length > 0) {
      this.samples.sort((a, b) => a - b);
      const median = this.samples[(this.samples.length - 1) >> 1]!;
      if (++this.windowsSinceReset >= this.o.resetWindows) {
        this.windowsSinceReset = 0;
        this.noLoad = median;
      } else if (median < this.noLoad) this.noLoad = median;
      next = this.vegas(limit, median);
    }
    if (next !== limit) {
      const smoothed = next < limit && this.windowDropped ? next : limit + this.o.smoothing * (next - limit);
      this.limitValue = Math.min(this.o.maxLimit, Math.max(this.o.minLimit, smoothed));
    }
    this.samples.length = 0;
    this.windowDropped = false;
    this.windowMaxInFlight = this.inFlightValue;
    this.windowStart = this.now();
  }

  /** Vegas's step (log10-scaled thresholds, as Netflix's defaults). */
  private vegas(limit: number, latencyMs: number): number {
    const log = Math.max(1, Math.log10(limit));
    const floor = this.o.noiseFloorMs;
    const latency = Math.max(latencyMs, floor);
    const queue = latency > 0 ? limit * (1 - Math.max(this.noLoad, floor) / latency) : 0;
    if (queue > 6 * log) return limit - log;
    // The load decided the latency, not the limit: no growth while under half of it was ever used.
    if (2 * this.windowMaxInFlight < limit) return limit;
    if (queue <= log) return limit + 6 * log;
    if (queue < 3 * log) return limit + log;
    return limit;
  }
}
