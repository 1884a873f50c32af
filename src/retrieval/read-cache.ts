/**
 * Per-connection cache of the embedded store's hot reads and directives ("served from memory,
 * invalidated on writes"). A hot read or a directive is the same answer until some connection commits a
 * write, so it is read, dated and shaped once and then served from memory.
 *
 * Invalidation ({@link WriteWatch}): a write through any store connection of this thread empties the
 * caches of every connection of the thread before their next read (a thread-wide write counter); a commit
 * by another process (the `ingest` CLI, another replica's tools) or thread is seen through SQLite's
 * `PRAGMA data_version`, read at most once per {@link DATA_VERSION_CHECK_MS}. Reading it begins and ends a
 * WAL read transaction: two `fcntl` locks and an `fstat`, ~12 µs on this 2-core VM where a syscall costs
 * ~7 µs — it used to run twice per assembly (hot and directive), now at most 100 times a second.
 */
import type Database from 'better-sqlite3';

/** Most cached answers; past it the oldest entry goes (a memory server may be asked for many agents). */
export const READ_CACHE_ENTRIES = 4096;

/**
 * Longest a commit by another process or thread may go unseen by the caches, ms. A caller cannot
 * observe a shorter staleness across processes (its own next call takes longer to arrive); writes through
 * this thread are seen at once.
 */
export const DATA_VERSION_CHECK_MS = 10;

/** Writes committed through any store connection of this thread (see {@link noteThreadWrite}). */
let threadWrites = 0;

/** Call after every write through a store connection of this thread. */
export function noteThreadWrite(): void {
  threadWrites++;
}

/**
 * Tells one connection's caches when the database may have changed: a stamp that moves on every write
 * of this thread at once, and on another connection's commit within {@link DATA_VERSION_CHECK_MS}.
 */
export class WriteWatch {
  readonly #dataVersion: Database.Statement<[], number>;
  readonly #now: () => number;
  #version = -1;
  #writes = -1;
  #nextCheck = Number.NEGATIVE_INFINITY;
  #stamp = 0;

  /**
   * @param db the watched connection; it must outlive the watch.
   * @param now a monotonic ms clock (tests inject one).
   */
  constructor(db: Database.Database, now: () => number = () => performance.now()) {
    this.#dataVersion = db.prepare<[], number>('PRAGMA data_version').pluck();
    this.#now = now;
  }

  /** Changes whenever a write is known to have happened since the last call (never goes back). */
  stamp(): number {
    if (threadWrites !== this.#writes) {
      this.#writes = threadWrites;
      this.#stamp++;
    }
    const now = this.#now();
    if (now >= this.#nextCheck) {
      this.#nextCheck = now + DATA_VERSION_CHECK_MS;
      const version = this.#dataVersion.get() as number;
      if (version !== this.#version) {
        this.#version = version;
        this.#stamp++;
      }
    }
    return this.#stamp;
  }
}

/** What a {@link ReadCache} needs to know of writes: a stamp that changes after each one. */
export interface WriteStamp {
  stamp(): number;
}

/** Bounds of a {@link ReadCache} besides its write stamp. */
export interface ReadCacheOptions {
  /** Most entries; default {@link READ_CACHE_ENTRIES}. */
  capacity?: number;
  /**
   * Longest an entry is served, ms, whatever the stamp says: the bound of a change the stamp does not
   * announce (the PostgreSQL store's inclusion counts). Default: none.
   */
  maxAgeMs?: number;
  /** A monotonic ms clock (tests inject one). */
  now?: () => number;
}

export class ReadCache<V> {
  readonly #watch: WriteStamp;
  readonly #entries = new Map<string, V>();
  /** When each entry was stored, ms; kept only with a `maxAgeMs`. */
  readonly #stored = new Map<string, number>();
  #seenStamp = -1;
  #generation = 0;
  readonly #capacity: number;
  readonly #maxAgeMs: number | undefined;
  readonly #now: () => number;

  /** @param watch the connection's write watch (or another {@link WriteStamp}), shared by its caches. */
  constructor(watch: WriteStamp, options: ReadCacheOptions = {}) {
    this.#watch = watch;
    this.#capacity = options.capacity ?? READ_CACHE_ENTRIES;
    this.#maxAgeMs = options.maxAgeMs;
    this.#now = options.now ?? (() => performance.now());
  }

  /** The cached answer for `key`, or `load()`'s (cached) when absent or stale. */
  get(key: string, load: () => V): V {
    const hit = this.peek(key);
    if (hit !== undefined) return hit;
    const generation = this.#generation;
    const value = load();
    this.put(key, value, generation);
    return value;
  }

  /**
   * The cached answer for `key` when it is still fresh (empties a stale cache first). For a load that
   * happens elsewhere (a store-read thread): note {@link generation} before starting it, then {@link put}.
   */
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

  /** Changes whenever the cache is emptied; read it before a load that {@link put} will store. */
  get generation(): number {
    return this.#generation;
  }

  /**
   * Stores a loaded answer unless the cache was emptied since `generation` was read: an answer loaded
   * across a write might predate it, and must not outlive the invalidation.
   */
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

  /** Entries held now (tests). */
  get size(): number {
    return this.#entries.size;
  }
}
