/**
 * The measured share of a request deadline D kept after retrieval (SPEC §10 answer guarantee; issue 9
 * item 4): the retrieval wall leaves the CPU stage its round-trip, and the CPU task leaves the degraded
 * answer its cost, both as running p99s of what this process actually took — not a fixed guess.
 */

/** Samples in each running window. */
export const RESERVE_WINDOW = 256;
/** The p99 is recomputed after this many new samples (a sort of {@link RESERVE_WINDOW} numbers). */
const RECOMPUTE_EVERY = 16;

/** Running p99 over the last {@link RESERVE_WINDOW} samples; 0 until the first sample. */
export class RunningP99 {
  readonly #ring = new Float64Array(RESERVE_WINDOW);
  #count = 0;
  #next = 0;
  #sinceRecompute = 0;
  #p99 = 0;

  /** Adds one sample (ms; negative or non-finite values are ignored). */
  record(ms: number): void {
    if (!(ms >= 0) || !Number.isFinite(ms)) return;
    this.#ring[this.#next] = ms;
    this.#next = (this.#next + 1) % RESERVE_WINDOW;
    if (this.#count < RESERVE_WINDOW) this.#count++;
    // The first samples recompute at once: a cold process must not keep a stale zero for 16 calls.
    if (++this.#sinceRecompute >= RECOMPUTE_EVERY || this.#count <= RECOMPUTE_EVERY) this.#recompute();
  }

  /** The p99 of the window, ms (nearest rank). */
  get p99(): number {
    return this.#p99;
  }

  #recompute(): void {
    this.#sinceRecompute = 0;
    const sorted = this.#ring.slice(0, this.#count).sort();
    this.#p99 = sorted[Math.min(this.#count - 1, Math.ceil(0.99 * this.#count) - 1)] ?? 0;
  }
}

/** Least time kept for the degraded answer (format + encode + send), ms. */
export const MIN_DEGRADED_RESERVE_MS = 2;
/** Headroom factor on the measured p99s: a loaded machine is slower than the window remembers. */
const HEADROOM = 1.5;

/** The two measured reserves of one process. */
export class StageReserve {
  /** CPU-stage round-trip (queue wait + run + return), ms. */
  readonly roundTrip = new RunningP99();
  /** Building the L2 degraded answer on the main thread, ms. */
  readonly degraded = new RunningP99();

  constructor(
    /** Floor of the CPU-stage share, ms (`IBEX_CONTEXT_CPU_STAGE_RESERVE_MS`). */
    readonly floorMs: number,
  ) {}

  /** Time the degraded answer keeps before D, ms: the CPU task's deadline is D minus this. */
  degradedMs(): number {
    return Math.max(MIN_DEGRADED_RESERVE_MS, HEADROOM * this.degraded.p99 + 1);
  }

  /**
   * Share of D the retrieval wall leaves to the CPU stage and the answer, ms: the measured round-trip
   * plus the degraded reserve, at least the floor, at most half of what is left (retrieval keeps the rest).
   * @param leftMs time until D, ms.
   */
  cpuShareMs(leftMs: number): number {
    const measured = HEADROOM * this.roundTrip.p99 + this.degradedMs();
    return Math.min(Math.max(this.floorMs, measured), Math.max(this.floorMs, leftMs / 2));
  }
}
