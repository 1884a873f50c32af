/**
 * Per-connection cache of the embedded store's hot reads and directives (issue 10: "served from memory,
 * invalidated on writes"). A hot read or a directive is the same answer until some connection commits a
 * write, so it is read, dated and shaped once and then served from memory.
 *
 * Invalidation: SQLite's `PRAGMA data_version` changes when another connection (the `ingest` CLI, the
 * memory server, another process) commits, and this connection's own writes bump a counter; either change
 * empties the cache before the next read. Checking costs one pragma step per read (about a microsecond),
 * far less than the 20-row read, ISO dating and object building it replaces.
 */
import type Database from 'better-sqlite3';

/** Most cached answers; past it the oldest entry goes (a memory server may be asked for many agents). */
export const READ_CACHE_ENTRIES = 4096;

export class ReadCache<V> {
  readonly #dataVersion: Database.Statement<[], number>;
  readonly #entries = new Map<string, V>();
  #seenVersion = -1;
  #writes = 0;
  #seenWrites = 0;
  #generation = 0;
  readonly #capacity: number;

  /** @param db the connection whose reads are cached; it must outlive the cache. */
  constructor(db: Database.Database, capacity = READ_CACHE_ENTRIES) {
    this.#dataVersion = db.prepare<[], number>('PRAGMA data_version').pluck();
    this.#capacity = capacity;
  }

  /** Call after every write through this connection (its own commits do not move `data_version`). */
  noteWrite(): void {
    this.#writes++;
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
    const version = this.#dataVersion.get() as number;
    if (version !== this.#seenVersion || this.#writes !== this.#seenWrites) {
      this.#entries.clear();
      this.#generation++;
      this.#seenVersion = version;
      this.#seenWrites = this.#writes;
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
    }
    this.#entries.set(key, value);
  }

  /** Entries held now (tests). */
  get size(): number {
    return this.#entries.size;
  }
}
