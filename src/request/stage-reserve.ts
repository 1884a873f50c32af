/**
 * The measured share of a request deadline D kept after retrieval (contract.md §10 answer
 * guarantee): the retrieval wall leaves the CPU stage its round-trip, and the CPU task leaves the degraded
 * answer its cost, both as running p99s of what this process actually took — not a fixed guess.
 */
import { monotonicNow } from '../util/clock.js';

/** Samples in each running window. */
export const RESERVE_WINDOW = 256;
/** The p99 and median are recomputed after this many new samples (one sort of {@link RESERVE_WINDOW} numbers). */
const RECOMPUTE_EVERY = 16;

/**
 * Running p99 (and median) over the last {@link RESERVE_WINDOW} samples; 0 until the first sample. Fewer
 * than 100 samples make the p99 their maximum.
 */
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
    // The first samples recompute at once: a cold process must not keep a stale zero for 16 calls.
    if (++this.#sinceRecompute >= RECOMPUTE_EVERY || this.#count <= RECOMPUTE_EVERY) this.#recompute();
  }

  /** Forgets every sample: the window is as new (p99 and median 0, count 0). */
  clear(): void {
    this.#count = 0;
    this.#next = 0;
    this.#sinceRecompute = 0;
    this.#p99 = 0;
    this.#p50 = 0;
  }

  /** Samples in the window (at most {@link RESERVE_WINDOW}); 0 = nothing measured yet. */
  get count(): number {
    return this.#count;
  }

  /** The p99 of the window, ms (nearest rank). */
  get p99(): number {
    return this.#p99;
  }

  /** The median of the window, ms (nearest rank). */
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
/**
 * Prior cost of a degraded answer over a small history, ms, until this process has measured one: the
 * first one runs cold code (0.8–3.4 ms, 16 fresh test processes on one 2-core VM; 2.3–5.2 ms on another).
 */
export const PRIOR_DEGRADED_MS = 5;
/**
 * Prior lateness of the CPU task's deadline timer, ms, until one is measured: a libuv timer fires after
 * its whole-ms delay, from the loop's cached time (0.9–2.6 ms late on an idle loop on one machine, 3.3 ms
 * on another). Without these two priors a process's first CPU-stage miss kept only the 5 ms floor, and a
 * call with 800 ms to spare was answered DEADLINE_EXCEEDED a fraction of a ms after D
 * (test/telemetry/metrics.test.ts, 5 runs of 12); at 2 ms the same test still failed 4 runs of 4 on the
 * second machine (the pool gave up 5.2 ms before D, the cold first degraded answer took until D + 0.03 ms).
 */
export const PRIOR_LATENESS_MS = 4;
/**
 * Prior cost of the degraded answer per MiB of history (validity check, code-point count, spliced format:
 * ~0.5–1 ms per MiB measured on the loaded 2-core VM), ms, until this process has measured its
 * own: pessimistic (×2–4), the measurements replace it. It must stay under 45 ms / 12.6 MiB ≈ 3.5 ms: a
 * prior that refused the largest contract.md §11 request within the default deadline would never let a stage
 * run teach the real cost.
 */
export const PRIOR_DEGRADED_MS_PER_MIB = 2;
/**
 * Histories from this size on (UTF-8 bytes) teach the per-MiB cost and are judged by it (smaller ones are
 * dominated by fixed costs).
 */
export const PER_MIB_FROM_BYTES = 256 * 1024;
/**
 * Samples of the per-MiB cost needed before a refusal trusts their median instead of the prior: one
 * cold or preempted first run must not refuse the large histories that follow.
 */
export const REFUSAL_MIN_SAMPLES = 3;
/**
 * Age of the newest per-MiB sample past which a refusal no longer trusts the window and uses the prior
 * again, ms. A refused call teaches nothing (it never runs), so without this a slow period would refuse large
 * histories for the process's lifetime; with it, at most one large call per this interval tries again.
 */
export const REFUSAL_MEMORY_MS = 10_000;
const MIB = 1024 * 1024;
/** Headroom factor on the measured p99s: a loaded machine is slower than the window remembers. */
const HEADROOM = 1.5;

/** The two measured reserves of one process. */
export class StageReserve {
  /** CPU-stage round-trip (queue wait + run + return), ms. */
  readonly roundTrip = new RunningP99();
  /** Building the degraded answer on the main thread, memories kept included, ms (histories < 256 KiB). */
  readonly degraded = new RunningP99();
  /** The same per MiB of history, for histories of 256 KiB and more: its cost grows with the history. */
  readonly degradedPerMiB = new RunningP99();
  /**
   * CPU-stage runs (worker time) per MiB of history, for histories of 256 KiB and more: what a large
   * task is expected to take. The stage does all of the degraded answer's work on the history and more
   * (decode, escape, pack, format), though on a worker thread, not on the contended main thread.
   */
  readonly stagePerMiB = new RunningP99();
  /**
   * How late the main thread learns that the CPU stage missed its deadline (timer granularity, a busy
   * event loop), ms: the degraded answer starts that much after the CPU task's deadline.
   */
  readonly lateness = new RunningP99();
  /**
   * How far past its planned end the retrieval wall actually ended (0 when on time), ms: a busy event
   * loop runs the wall's timer and the branches' continuations late, and the CPU stage pays for it.
   */
  readonly wallOverrun = new RunningP99();

  /** When the newest degraded per-MiB sample was recorded, ms on {@link StageReserve.now}'s clock. */
  #degradedAt = Number.NEGATIVE_INFINITY;
  /** When the newest CPU-stage per-MiB sample was recorded, same clock. */
  #stageAt = Number.NEGATIVE_INFINITY;

  constructor(
    /** Floor of the CPU-stage share, ms (`IBEX_CONTEXT_CPU_STAGE_RESERVE_MS`). */
    readonly floorMs: number,
    /** Monotonic clock, ms (tests inject one). */
    readonly now: () => number = monotonicNow,
  ) {}

  /** Records one degraded answer's cost (`ms`) for a history of `historyBytes` UTF-8 bytes. */
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

  /**
   * Records a CPU-stage run (`ms`, worker time) over a history of `historyBytes`, learnt per MiB for
   * histories of 256 KiB and more ({@link StageReserve.stagePerMiB}).
   */
  recordStageRun(ms: number, historyBytes: number): void {
    if (historyBytes < PER_MIB_FROM_BYTES) return;
    this.#stageAt = recordFresh(this.stagePerMiB, this.#stageAt, ms / (historyBytes / MIB), this.now());
  }

  /** The window's median while it holds {@link REFUSAL_MIN_SAMPLES} and its newest sample is fresh, else null. */
  #freshMedian(window: RunningP99, at: number): number | null {
    return window.count >= REFUSAL_MIN_SAMPLES && this.now() - at <= REFUSAL_MEMORY_MS ? window.p50 : null;
  }

  /**
   * Time the degraded answer keeps before D, ms: the CPU task's deadline is D minus this. Its cost is a
   * fixed part plus a part proportional to the history it formats, and the timer's lateness (measured p99s;
   * until measured, {@link PRIOR_DEGRADED_MS}, {@link PRIOR_DEGRADED_MS_PER_MIB}, {@link PRIOR_LATENESS_MS}),
   * with headroom.
   * @param historyBytes UTF-8 bytes of the request's history.
   */
  degradedMs(historyBytes = 0): number {
    // Not bounded by stage runs: they are worker time, and the degraded answer runs on the main thread.
    const perMiB = this.degradedPerMiB.count > 0 ? this.degradedPerMiB.p99 : PRIOR_DEGRADED_MS_PER_MIB;
    const fixed = this.degraded.count > 0 ? this.degraded.p99 : PRIOR_DEGRADED_MS;
    const late = this.lateness.count > 0 ? this.lateness.p99 : PRIOR_LATENESS_MS;
    const measured = fixed + (historyBytes / MIB) * perMiB + late;
    return Math.max(MIN_DEGRADED_RESERVE_MS, HEADROOM * measured + 1);
  }

  /**
   * Whether a degraded answer for a history of `historyBytes` can no longer be ready in `leftMs`: its
   * typical cost per MiB ({@link StageReserve.refusalPerMiB}) times the history's MiB exceeds the time
   * left. Only histories of 256 KiB and more are ever judged so (smaller ones cost about a millisecond):
   * building 4–10 MB of history on the main thread for an answer that would come after D only stalls
   * every other caller's answers (contract.md §1 isolation rule, §10: DEADLINE_EXCEEDED is for calls
   * that leave less than the degraded answer needs).
   *
   * The median, not the p99 the reserves use: a refused call never runs, so it cannot correct the estimate
   * that refused it. Judged by a p99 (the maximum of a small window), one measurement slowed by a
   * preemption or a GC refused every large history of its size until 256 later samples pushed it out, and
   * for ever when no large call ran again.
   * @param leftMs time until D, ms.
   */
  degradedTooLate(leftMs: number, historyBytes: number): boolean {
    if (historyBytes < PER_MIB_FROM_BYTES) return false;
    return leftMs < (historyBytes / MIB) * this.refusalPerMiB();
  }

  /**
   * The per-MiB cost (ms per MiB of history) that {@link StageReserve.degradedTooLate} judges by: the
   * median of the degraded answers' window while it holds {@link REFUSAL_MIN_SAMPLES} and its newest sample
   * is at most {@link REFUSAL_MEMORY_MS} old (a stale window is emptied by its next sample); else the
   * CPU-stage runs' median on the same terms where it is below the prior (a stage run does all of the
   * degraded answer's work and more, so a pessimistic prior cannot refuse large histories for ever when
   * degraded answers are rare); else {@link PRIOR_DEGRADED_MS_PER_MIB}. A fresh degraded median is used
   * as it is, not bounded by the stage runs: it is main-thread time, which a contended thread makes
   * longer than the worker's. Judging by the stage runs alone refused calls whose degraded answer would
   * still have been ready in time (contract.md §10).
   */
  refusalPerMiB(): number {
    const stage = this.#freshMedian(this.stagePerMiB, this.#stageAt);
    return (
      this.#freshMedian(this.degradedPerMiB, this.#degradedAt) ??
      Math.min(PRIOR_DEGRADED_MS_PER_MIB, stage ?? PRIOR_DEGRADED_MS_PER_MIB)
    );
  }

  /**
   * Whether a CPU task over a history of `historyBytes` given `cpuMs` (until its result is no longer
   * awaited) is not expected to finish: its typical run, the stage runs' median per MiB (fresh, at least
   * {@link REFUSAL_MIN_SAMPLES} samples: else nothing is judged) times the history's MiB, with headroom,
   * exceeds `cpuMs`.
   * Such a task is not submitted (contract.md §10, never wait for a stage that cannot finish): a task that runs
   * takes the request's history bytes with it (from 64 KiB, when the request has its own buffer) and,
   * once started, only gives them back with its result, so a late one leaves nothing to build the degraded
   * answer from, and the call ends DEADLINE_EXCEEDED where the degraded answer would have been ready in
   * time. The typical run gets {@link HEADROOM}: with a bare median, a task whose run just fits missed
   * its time about half of the time. Judged when the task is submitted and again when a queued task
   * reaches a free thread (`CpuRunOptions.fitsAt`), so time spent waiting in the queue counts.
   * Histories under {@link PER_MIB_FROM_BYTES}: never.
   * @param cpuMs time until the CPU task's result is no longer awaited, ms: D for a task that takes the
   *   request's bytes, its own deadline otherwise.
   */
  stageTooLong(cpuMs: number, historyBytes: number): boolean {
    if (historyBytes < PER_MIB_FROM_BYTES) return false;
    const perMiB = this.#freshMedian(this.stagePerMiB, this.#stageAt);
    return perMiB !== null && cpuMs < HEADROOM * (historyBytes / MIB) * perMiB;
  }

  /**
   * Share of D the retrieval wall leaves to the CPU stage and the answer, ms: the measured round-trip
   * and the wall's measured overrun (event-loop delay) plus the degraded reserve, at least the floor, at most half of what is left (retrieval keeps the rest).
   * @param leftMs time until D, ms.
   * @param historyBytes UTF-8 bytes of the request's history.
   */
  cpuShareMs(leftMs: number, historyBytes = 0): number {
    const measured = HEADROOM * (this.roundTrip.p99 + this.wallOverrun.p99) + this.degradedMs(historyBytes);
    return Math.min(Math.max(this.floorMs, measured), Math.max(this.floorMs, leftMs / 2));
  }

  /**
   * Whether a CPU task given `cpuMs` (until its deadline) can be expected to answer: at least the measured
   * round-trip p99 (no headroom; anything fits before the first measurement). A task that cannot is not
   * submitted: its withdrawal would only be learnt when a timer fires, late on a busy loop, and the
   * degraded answer that follows would then miss D (contract.md §10: never wait for a stage that cannot finish).
   */
  cpuStageFits(cpuMs: number): boolean {
    return cpuMs >= this.roundTrip.p99;
  }
}

/**
 * Records `sample` in a per-MiB window whose newest sample was taken at `at`, first emptying it when that
 * is more than {@link REFUSAL_MEMORY_MS} old: a window judged stale must not count as fresh again, with
 * all its old samples, because one new call ran. Returns the new sample's time.
 */
function recordFresh(window: RunningP99, at: number, sample: number, now: number): number {
  if (now - at > REFUSAL_MEMORY_MS) window.clear();
  window.record(sample);
  return now;
}
