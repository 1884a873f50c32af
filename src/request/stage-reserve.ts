import { monotonicNow } from '../util/clock.js';

export const RESERVE_WINDOW = 256;
const RECOMPUTE_EVERY = 16;

/** Running p99 and median (ms) over the last {@link RESERVE_WINDOW} samples; 0 until the first sample. */
export class RunningP99 {
  readonly #ring = new Float64Array(RESERVE_WINDOW);
  #count = 0;
  #next = 0;
  #sinceRecompute = 0;
  #p99 = 0;
  #p50 = 0;

  /** Adds one sample (ms; negative or non-finite values are ignored). */
  record(ms: number): void {
    if (!(ms >= 0) || !Number.isFinite(ms)) return;
    this.#ring[this.#next] = ms;
    this.#next = (this.#next + 1) % RESERVE_WINDOW;
    if (this.#count < RESERVE_WINDOW) this.#count++;
    // A cold process must not keep a stale zero for 16 calls.
    if (++this.#sinceRecompute >= RECOMPUTE_EVERY || this.#count <= RECOMPUTE_EVERY) this.#recompute();
  }

  clear(): void {
    this.#count = 0;
    this.#next = 0;
    this.#sinceRecompute = 0;
    this.#p99 = 0;
    this.#p50 = 0;
  }

  get count(): number {
    return this.#count;
  }

  /** Nearest-rank p99 and median of the window, ms. */
  get p99(): number {
    return this.#p99;
  }

  get p50(): number {
    return this.#p50;
  }

  #recompute(): void {
    this.#sinceRecompute = 0;
    const sorted = this.#ring.slice(0, this.#count).sort();
    this.#p99 = sorted[Math.min(this.#count - 1, Math.ceil(0.99 * this.#count) - 1)] ?? 0;
    this.#p50 = sorted[Math.max(0, Math.ceil(0.5 * this.#count) - 1)] ?? 0;
  }
}

/** Least time kept for the degraded answer (format + encode + send, and a late timer), ms. */
export const MIN_DEGRADED_RESERVE_MS = 5;
/** Priors until this process has measured its own (ms; per MiB of history): docs/design/request-path.md. */
export const PRIOR_DEGRADED_MS = 5;
export const PRIOR_LATENESS_MS = 4;
export const PRIOR_DEGRADED_MS_PER_MIB = 2;
/** Histories from this size on (UTF-8 bytes) are judged per MiB; smaller ones are dominated by fixed costs. */
export const PER_MIB_FROM_BYTES = 256 * 1024;
/** Per-MiB samples needed before a refusal trusts their median: one cold first run must not refuse. */
export const REFUSAL_MIN_SAMPLES = 3;
/** Age (ms) of the newest per-MiB sample past which refusals use the prior again: a refused call never runs. */
export const REFUSAL_MEMORY_MS = 10_000;
const MIB = 1024 * 1024;
/** A loaded machine is slower than the window remembers. */
const HEADROOM = 1.5;

/** Measured reserves of one process (contract.md §10); why: docs/design/request-path.md. */
export class StageReserve {
  /** CPU stage: queue wait + run + return. */
  readonly roundTrip = new RunningP99();
  /** Degraded answer, histories < 256 KiB. */
  readonly degraded = new RunningP99();
  /** The same per MiB, histories ≥ 256 KiB. */
  readonly degradedPerMiB = new RunningP99();
  /** CPU-stage runs (worker time) per MiB, ≥ 256 KiB. */
  readonly stagePerMiB = new RunningP99();
  /** How late a missed CPU-stage deadline is learnt. */
  readonly lateness = new RunningP99();
  /** Retrieval wall's end past plan (0 when on time) */
  readonly wallOverrun = new RunningP99();

  #degradedAt = Number.NEGATIVE_INFINITY;
  #stageAt = Number.NEGATIVE_INFINITY;

  constructor(
    /** IBEX_CONTEXT_CPU_STAGE_RESERVE_MS. */
    readonly floorMs: number,
    readonly now: () => number = monotonicNow,
  ) {}

  recordDegraded(ms: number, historyBytes: number): void {
    if (historyBytes < PER_MIB_FROM_BYTES) {
      this.degraded.record(ms);
      return;
    }
    this.#degradedAt = recordFresh(
      this.degradedPerMiB,
      this.#degradedAt,
      ms / (historyBytes / MIB),
      this.now(),
    );
  }

  /** Records a CPU-stage run (`ms`, worker time) over `historyBytes`; learnt per MiB from 256 KiB. */
  recordStageRun(ms: number, historyBytes: number): void {
    if (historyBytes < PER_MIB_FROM_BYTES) return;
    this.#stageAt = recordFresh(this.stagePerMiB, this.#stageAt, ms / (historyBytes / MIB), this.now());
  }

  /** The window's median while it holds {@link REFUSAL_MIN_SAMPLES} and its newest sample is fresh, else null. */
  #freshMedian(window: RunningP99, at: number): number | null {
    return window.count >= REFUSAL_MIN_SAMPLES && this.now() - at <= REFUSAL_MEMORY_MS ? window.p50 : null;
  }

  /** Time the degraded answer keeps before D, ms: fixed + per-MiB cost + timer lateness, with headroom. */
  degradedMs(historyBytes = 0): number {
    // Not bounded by stage runs: they are worker time, and the degraded answer runs on the main thread.
    const perMiB = this.degradedPerMiB.count > 0 ? this.degradedPerMiB.p99 : PRIOR_DEGRADED_MS_PER_MIB;
    const fixed = this.degraded.count > 0 ? this.degraded.p99 : PRIOR_DEGRADED_MS;
    const late = this.lateness.count > 0 ? this.lateness.p99 : PRIOR_LATENESS_MS;
    const measured = fixed + (historyBytes / MIB) * perMiB + late;
    return Math.max(MIN_DEGRADED_RESERVE_MS, HEADROOM * measured + 1);
  }

  /** Whether a degraded answer can no longer be ready in `leftMs` (docs/design/worker-pool.md). */
  degradedTooLate(leftMs: number, historyBytes: number): boolean {
    if (historyBytes < PER_MIB_FROM_BYTES) return false;
    return leftMs < (historyBytes / MIB) * this.refusalPerMiB();
  }

  /**
   * Per-MiB cost (ms) that {@link StageReserve.degradedTooLate} judges by: the fresh degraded median, else
   * the fresh stage-run median where below the prior, else {@link PRIOR_DEGRADED_MS_PER_MIB}.
   */
  refusalPerMiB(): number {
    const stage = this.#freshMedian(this.stagePerMiB, this.#stageAt);
    return (
      this.#freshMedian(this.degradedPerMiB, this.#degradedAt) ??
      Math.min(PRIOR_DEGRADED_MS_PER_MIB, stage ?? PRIOR_DEGRADED_MS_PER_MIB)
    );
  }

  /**
   * Whether a CPU task over `historyBytes` is not expected to finish in `cpuMs` (ms until its result is no
   * longer awaited), judged by the fresh stage-run median per MiB (docs/design/worker-pool.md).
   */
  stageTooLong(cpuMs: number, historyBytes: number): boolean {
    if (historyBytes < PER_MIB_FROM_BYTES) return false;
    const perMiB = this.#freshMedian(this.stagePerMiB, this.#stageAt);
    return perMiB !== null && cpuMs < HEADROOM * (historyBytes / MIB) * perMiB;
  }

  /** Share of D (ms) left to the CPU stage and the answer: at least the floor, at most half of `leftMs`. */
  cpuShareMs(leftMs: number, historyBytes = 0): number {
    const measured = HEADROOM * (this.roundTrip.p99 + this.wallOverrun.p99) + this.degradedMs(historyBytes);
    return Math.min(Math.max(this.floorMs, measured), Math.max(this.floorMs, leftMs / 2));
  }

  /** Whether a CPU task given `cpuMs` can answer; if not it is not submitted (its answer would miss D). */
  cpuStageFits(cpuMs: number): boolean {
    return cpuMs >= this.roundTrip.p99;
  }
}

/** Records `sample`, first emptying a window whose newest sample is stale; returns the sample's time. */
function recordFresh(window: RunningP99, at: number, sample: number, now: number): number {
  if (now - at > REFUSAL_MEMORY_MS) window.clear();
  window.record(sample);
  return now;
}
