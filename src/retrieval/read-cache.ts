/**
 * Per-connection cache of hot reads and directives, emptied on any write of this thread at once and on
 * another process's commit within {@link DATA_VERSION_CHECK_MS} (docs/design/embedded-store.md).
 */
import type Database from 'better-sqlite3';

export const READ_CACHE_ENTRIES = 4096;

/** Longest a commit by another process or thread may go unseen by the caches, ms. */
export const DATA_VERSION_CHECK_MS = 10;

let threadWrites = 0;

export function noteThreadWrite(): void {
  threadWrites++;
}

/** A stamp that moves on every write of this thread and on another connection's commit. */
export class WriteWatch {
  readonly #dataVersion: Database.Statement<[], number>;
  readonly #now: () => number;
  #version = -1;
  #writes = -1;
  #nextCheck = Number.NEGATIVE_INFINITY;
  #stamp = 0;

  /** @param checkEveryMs how often another connection's commits are looked for; 0 = on every stamp. */
  constructor(
    db: Database.Database,
    now: () => number = () => performance.now(),
    readonly checkEveryMs = DATA_VERSION_CHECK_MS,
  ) {
    this.#dataVersion = db.prepare<[], number>('PRAGMA data_version').pluck();
    this.#now = now;
  }

  stamp(): number {
    if (threadWrites !== this.#writes) {
      this.#writes = threadWrites;
      this.#stamp++;
    }
    const now = this.#now();
    if (now >= this.#nextCheck) {
      this.#nextCheck = now + this.checkEveryMs;
      const version = this.#dataVersion.get() as number;
      if (version !== this.#version) {
        this.#version = version;
        this.#stamp++;
      }
    }
    return this.#stamp;
  }
}

export interface WriteStamp {
  stamp(): number;
}

export interface ReadCacheOptions {
  capacity?: number;
  /** Longest an entry is served, ms, whatever the stamp: bounds changes it does not announce. */
  maxAgeMs?: number;
  now?: () => number;
}

export class ReadCache<V> {
  readonly #watch: WriteStamp;
  readonly #entries = new Map<string, V>();
  readonly #stored = new Map<string, number>();
  #seenStamp = -1;
  #generation = 0;
  readonly #capacity: number;
  readonly #maxAgeMs: number | undefined;
  readonly #now: () => number;

  constructor(watch: WriteStamp, options: ReadCacheOptions = {}) {
    this.#watch = watch;
    this.#capacity = options.capacity ?? READ_CACHE_ENTRIES;
    this.#maxAgeMs = options.maxAgeMs;
    this.#now = options.now ?? (() => performance.now());
  }

  get(key: string, load: () => V): V {
    const hit = this.peek(key);
    if (hit !== undefined) return hit;
    const generation = this.#generation;
    const value = load();
    this.put(key, value, generation);
    return value;
  }

  /** The fresh cached answer; for a load elsewhere, read {@link generation} first, then {@link put}. */
  peek(key: string): V | undefined {
    const stamp = this.#watch.stamp();
    if (stamp !== this.#seenStamp) {
      this.#entries.clear();
      this.#stored.clear();
      this.#generation++;
      this.#seenStamp = stamp;
    }
    if (this.#maxAgeMs !== undefined) {
      const at = this.#stored.get(key);
      if (at !== undefined && this.#now() - at > this.#maxAgeMs) {
        this.#entries.delete(key);
        this.#stored.delete(key);
        return undefined;
      }
    }
    return this.#entries.get(key);
  }

  get generation(): number {
    return this.#generation;
  }

  /** Stores unless the cache was emptied since `generation`: a load across a write may predate it. */
  put(key: string, value: V, generation: number): void {
    if (generation !== this.#generation) return;
    if (this.#entries.size >= this.#capacity) {
      const oldest = this.#entries.keys().next().value as string;
      this.#entries.delete(oldest);
      this.#stored.delete(oldest);
    }
    this.#entries.set(key, value);
    if (this.#maxAgeMs !== undefined) this.#stored.set(key, this.#now());
  }

  get size(): number {
    return this.#entries.size;
  }
}
