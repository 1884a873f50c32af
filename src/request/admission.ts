/** Admission at arrival: a Vegas-style adaptive concurrency limit (docs/overload.md). */

/** Tuning of {@link AdaptiveConcurrencyLimit}; every field optional, defaults after each field. */
export interface AdmissionOptions {
  /** Calls; maxLimit (starts open, comes down on evidence) */
  initialLimit?: number;
  /** Calls; 4. */
  minLimit?: number;
  /** Calls (IBEX_CONTEXT_MAX_IN_FLIGHT); 128. */
  maxLimit?: number;
  /** Share of a window's new limit mixed in, 0 < s ≤ 1; 0.5. */
  smoothing?: number;
  /** Limit multiplier after a window with a drop; 0.9. */
  backoff?: number;
  /** Shortest window; 50. */
  windowMs?: number;
  /** Fewest samples that close a window; 10. */
  minSamples?: number;
  /** Samples that close a window whatever its age; 200. */
  maxSamples?: number;
  /** Windows after which the no-load latency is re-measured; 200. */
  resetWindows?: number;
  /** Latency below which no queue is read; 2. */
  noiseFloorMs?: number;
  /** Monotonic clock, ms; performance.now. */
  now?: () => number;
}

export interface AdmissionState {
  /** Calls, fractional (in-flight is compared with its floor) */
  limit: number;
  inFlight: number;
  /** Calls refused at arrival since start. */
  sheds: number;
  /** Infinity until the first window closes. */
  noLoadMs: number;
}

export interface AdmissionSample {
  /** Own-resource latency; ignored when `dropped`. */
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

  /** Admits one arriving call (true; the caller must {@link release} it once) or sheds it (false). */
  tryAcquire(): boolean {
    if (this.inFlightValue >= Math.floor(this.limitValue)) {
      this.shedCount++;
      return false;
    }
    this.inFlightValue++;
    if (this.inFlightValue > this.windowMaxInFlight) this.windowMaxInFlight = this.inFlightValue;
    return true;
  }

  /** Ends an admitted call; `sample` null when it ended before its own stages. */
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

  private vegas(limit: number, latencyMs: number): number {
    const log = Math.max(1, Math.log10(limit));
    const floor = this.o.noiseFloorMs;
    const latency = Math.max(latencyMs, floor);
    const queue = latency > 0 ? limit * (1 - Math.max(this.noLoad, floor) / latency) : 0;
    if (queue > 6 * log) return limit - log;
    // The load decided the latency, not the limit.
    if (2 * this.windowMaxInFlight < limit) return limit;
    if (queue <= log) return limit + 6 * log;
    if (queue < 3 * log) return limit + log;
    return limit;
  }
}
