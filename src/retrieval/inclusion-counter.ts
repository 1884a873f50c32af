/**
 * Counts included memories (frequency input, contract.md §7) off the hot path, flushed every `flushMs`.
 * At-most-once: a full map or failed write drops counts rather than build a backlog.
 */
import { INCLUSION_BATCH, type InclusionCount } from './feedback.js';

export interface InclusionSink {
  addInclusions(rows: readonly InclusionCount[]): number | Promise<number>;
}

/** Monotonic except `pending`. */
export interface InclusionStats {
  recorded: number;
  /** Dropped because the map was full. */
  droppedFull: number;
  /** Dropped because their batch's write failed. */
  droppedFailed: number;
  flushed: number;
  batches: number;
  pending: number;
}

export interface InclusionCounterOptions {
  flushMs: number;
  /** `IBEX_CONTEXT_INCLUSION_MAX_PENDING`: most distinct memories held between flushes. */
  maxPending: number;
  onError?: (err: unknown) => void;
}

export class InclusionCounter {
  readonly #sink: InclusionSink;
  readonly #maxPending: number;
  readonly #onError: (err: unknown) => void;
  readonly #timer: NodeJS.Timeout;
  #pending = new Map<string, Map<string, number>>();
  #pendingSize = 0;
  #flushing: Promise<void> | undefined;
  #closed = false;
  readonly #stats = { recorded: 0, droppedFull: 0, droppedFailed: 0, flushed: 0, batches: 0 };

  constructor(sink: InclusionSink, options: InclusionCounterOptions) {
    this.#sink = sink;
    this.#maxPending = options.maxPending;
    this.#onError = options.onError ?? (() => {});
    this.#timer = setInterval(() => void this.flush(), options.flushMs);
    this.#timer.unref();
  }

  /** No I/O, never throws. */
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
        org.set(ownString(id), 1);
        this.#pendingSize++;
      }
      this.#stats.recorded++;
    }
  }

  /** One batch at a time; joins a running flush. Never rejects. */
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

  stats(): InclusionStats {
    return { ...this.#stats, pending: this.#pendingSize };
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#closed = true;
    await this.#flushing;
    await this.flush();
  }
}

/**
 * `id` in a string of its own. A memory id unpacked from the store is a slice of the read's one string of
 * every id (~36 bytes × hits); kept as a key for up to `flushMs`, the slice would keep all of that alive.
 */
function ownString(id: string): string {
  return ` ${id}`.slice(1);
}
