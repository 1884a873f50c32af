/**
 * Counts the memories each answer included (the composite's frequency input, contract.md §7) off the
 * hot path: an answer adds its packed ids to an in-memory map, and a timer writes the map to the store
 * every `flushMs`, one statement per {@link INCLUSION_BATCH} memories, and once more on shutdown. An
 * answer never waits for a write, and the map is bounded: once it holds `maxPending` distinct memories,
 * inclusions of memories not already in it are dropped and counted until the next flush empties it.
 *
 * Counts are at-most-once: a failed write drops its batch (counted) rather than retrying into a store
 * that is failing, since a frequency a little low costs less than a backlog.
 */
import { INCLUSION_BATCH, type InclusionCount } from './feedback.js';

/** What the counter writes to: the store's `addInclusions` ({@link FeedbackStore}). */
export interface InclusionSink {
  addInclusions(rows: readonly InclusionCount[]): number | Promise<number>;
}

/** Counter figures, for metrics and tests. Monotonic except `pending`. */
export interface InclusionStats {
  /** Inclusions taken into the map. */
  recorded: number;
  /** Inclusions dropped because the map was full. */
  droppedFull: number;
  /** Inclusions dropped because their batch's write failed. */
  droppedFailed: number;
  /** Inclusions written. */
  flushed: number;
  /** Statements run. */
  batches: number;
  /** Distinct memories waiting for the next flush. */
  pending: number;
}

/** Options of {@link InclusionCounter}. */
export interface InclusionCounterOptions {
  /** Interval between flushes, ms (`IBEX_CONTEXT_INCLUSION_FLUSH_MS`). */
  flushMs: number;
  /** Most distinct memories held between flushes (`IBEX_CONTEXT_INCLUSION_MAX_PENDING`). */
  maxPending: number;
  /** Told of a failed write (its error); default: ignored. */
  onError?: (err: unknown) => void;
}

/** Batches inclusion counts into a store. */
export class InclusionCounter {
  readonly #sink: InclusionSink;
  readonly #maxPending: number;
  readonly #onError: (err: unknown) => void;
  readonly #timer: NodeJS.Timeout;
  /** Pending counts by org, then memory id (no key string built per inclusion). */
  #pending = new Map<string, Map<string, number>>();
  /** Distinct memories in {@link #pending}. */
  #pendingSize = 0;
  #flushing: Promise<void> | undefined;
  #closed = false;
  readonly #stats = { recorded: 0, droppedFull: 0, droppedFailed: 0, flushed: 0, batches: 0 };

  constructor(sink: InclusionSink, options: InclusionCounterOptions) {
    this.#sink = sink;
    this.#maxPending = options.maxPending;
    this.#onError = options.onError ?? (() => {});
    this.#timer = setInterval(() => void this.flush(), options.flushMs);
    // The counter never keeps the process alive: shutdown flushes it explicitly (close()).
    this.#timer.unref();
  }

  /**
   * Counts one answer's included memories. O(ids), no I/O, never throws.
   * @param orgId the call's org (canonical UUID).
   * @param memoryIds the packed memories' ids.
   */
  record(orgId: string, memoryIds: Iterable<string>): void {
    if (this.#closed) return;
    let org = this.#pending.get(orgId);
    for (const id of memoryIds) {
      const n = org?.get(id);
      if (n !== undefined) org!.set(id, n + 1);
      else if (this.#pendingSize >= this.#maxPending) {
        this.#stats.droppedFull++;
        continue;
      } else {
        if (org === undefined) {
          org = new Map();
          this.#pending.set(orgId, org);
        }
        org.set(id, 1);
        this.#pendingSize++;
      }
      this.#stats.recorded++;
    }
  }

  /**
   * Writes what is pending, {@link INCLUSION_BATCH} memories per statement, one statement at a time. A
   * flush already running is joined, not doubled. Never rejects.
   */
  flush(): Promise<void> {
    if (this.#flushing) return this.#flushing;
    if (this.#pendingSize === 0) return Promise.resolve();
    const taken = this.#pending;
    this.#pending = new Map();
    this.#pendingSize = 0;
    this.#flushing = this.#write(taken).finally(() => {
      this.#flushing = undefined;
    });
    return this.#flushing;
  }

  async #write(taken: Map<string, Map<string, number>>): Promise<void> {
    let batch: InclusionCount[] = [];
    let inBatch = 0;
    const send = async () => {
      const rows = batch;
      const count = inBatch;
      batch = [];
      inBatch = 0;
      try {
        await this.#sink.addInclusions(rows);
        this.#stats.flushed += count;
      } catch (err) {
        this.#stats.droppedFailed += count;
        this.#onError(err);
      }
      this.#stats.batches++;
    };
    for (const [orgId, counts] of taken) {
      for (const [memoryId, count] of counts) {
        batch.push({ orgId, memoryId, count });
        inBatch += count;
        if (batch.length === INCLUSION_BATCH) {
          await send();
          // An in-process store writes synchronously on the event loop: calls get a turn between batches.
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      }
    }
    if (batch.length > 0) await send();
  }

  /** Figures for metrics. */
  stats(): InclusionStats {
    return { ...this.#stats, pending: this.#pendingSize };
  }

  /** Stops the timer and writes what is left; later {@link record} calls are ignored. Idempotent. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#closed = true;
    await this.#flushing;
    await this.flush();
  }
}
