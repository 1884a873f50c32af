/**
 * Reads of the embedded store, either in-process (synchronous better-sqlite3, for tools and tests) or in
 * a small Piscina pool of store-read threads (the service), so SQLite never runs on the gRPC event loop.
 */
import path from 'node:path';
import { Piscina } from 'piscina';
import { projectRoot } from '../pool/worker-file.js';
import type { DirectiveEnvelope, EmbeddedStore, StoreHit } from './embedded-store.js';

/** One read, as sent to a store-read thread. */
export interface StoreReadTask {
  db: string;
  op: 'hot' | 'search' | 'directive';
  orgId: string;
  agentId: string;
  query?: string;
  /** Content cap, code points (`IBEX_CONTEXT_MAX_MEMORY_CHARS`): longer rows come back `oversize`. */
  maxChars?: number;
  /**
   * Set to 1 (Atomics) by the caller once its branch has given up: a queued read then costs the thread
   * nothing, so a backlog of abandoned searches drains at once instead of running each one.
   */
  cancelled?: Int32Array;
}

/** The reads the embedded sources need; sync or async. */
export interface StoreReads {
  hot(orgId: string, agentId: string): StoreHit[] | Promise<StoreHit[]>;
  /** @param signal the branch's signal: once it aborts the read may be skipped. */
  search(
    orgId: string,
    agentId: string,
    query: string,
    signal?: AbortSignal,
  ): StoreHit[] | Promise<StoreHit[]>;
  getDirective(orgId: string, agentId: string): DirectiveEnvelope | null | Promise<DirectiveEnvelope | null>;
  close(): Promise<void>;
}

/** Absolute path of the compiled store-read worker (`npm run build`). */
export function resolveStoreWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'store-worker.js');
}

/** In-process reads on an open store (the caller owns and closes the store). */
export function inProcessReads(store: EmbeddedStore): StoreReads {
  return {
    hot: (org, agent) => store.hot(org, agent),
    search: (org, agent, query) => store.search(org, agent, query),
    getDirective: (org, agent) => store.getDirective(org, agent),
    close: async () => {},
  };
}

/** Store-read figures for metrics (issue 11 item 6). */
export interface StoreReadStats {
  /** Searches waiting for a store-read thread. */
  queueSize: number;
  /** Searches refused at once because that queue was full (cold branch `error`, code `busy`). */
  busyRejections: number;
}

/**
 * Reads in `threads` store-read threads, each with its own connection to the WAL database `db`.
 * No AbortSignal is passed to piscina: aborting a running task terminates its thread. A branch that gives
 * up simply stops waiting (the read finishes in about a millisecond and is dropped).
 */
export class PooledStoreReads implements StoreReads {
  readonly #pool: Piscina;
  readonly #db: string;
  readonly #maxQueue: number;
  readonly #maxChars: number | undefined;
  #busyRejections = 0;

  private constructor(pool: Piscina, db: string, maxQueue: number, maxChars: number | undefined) {
    this.#pool = pool;
    this.#db = db;
    this.#maxQueue = maxQueue;
    this.#maxChars = maxChars;
  }

  /**
   * Starts the threads and opens each one's connection before resolving.
   * @param maxChars content cap of every read, code points (default the store's, 65536).
   * @throws the worker's error when the database cannot be opened.
   */
  static async start(
    db: string,
    threads: number,
    filename = resolveStoreWorkerFile(),
    maxChars?: number,
  ): Promise<PooledStoreReads> {
    const maxQueue = 4 * threads;
    const pool = new Piscina({
      filename,
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      // better-sqlite3 is synchronous: a second task per thread would only queue behind the first.
      concurrentTasksPerWorker: 1,
      // Load shedding: a search costs about a millisecond, so a few queued per thread already eat into the
      // wall. Past that a search fails at once (cold branch `error`, an L1 answer now) instead of waiting
      // out the wall while holding the call — under overload that wait is what makes answers late.
      maxQueue,
    });
    const reads = new PooledStoreReads(pool, path.resolve(db), maxQueue, maxChars);
    const warm = '00000000-0000-4000-8000-000000000000';
    await Promise.all(Array.from({ length: threads }, () => reads.getDirective(warm, warm)));
    return reads;
  }

  hot(orgId: string, agentId: string): Promise<StoreHit[]> {
    const task: StoreReadTask = { db: this.#db, op: 'hot', orgId, agentId, maxChars: this.#maxChars };
    return (this.#pool.run(task) as Promise<StoreHit[]>).catch((err: unknown) => this.#busy(err));
  }

  search(orgId: string, agentId: string, query: string, signal?: AbortSignal): Promise<StoreHit[]> {
    const cancelled = new Int32Array(new SharedArrayBuffer(4));
    const onAbort = () => Atomics.store(cancelled, 0, 1);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    const task: StoreReadTask = {
      db: this.#db,
      op: 'search',
      orgId,
      agentId,
      query,
      cancelled,
      maxChars: this.#maxChars,
    };
    return (this.#pool.run(task) as Promise<StoreHit[]>)
      .catch((err: unknown) => this.#busy(err))
      .finally(() => {
        signal?.removeEventListener('abort', onAbort);
      });
  }

  /** piscina rejects at once when the bounded queue is full: say "busy", not "unavailable (error)". */
  #busy(err: unknown): never {
    if (this.#pool.queueSize >= this.#maxQueue) {
      this.#busyRejections++;
      throw Object.assign(new Error('store-read queue full'), { code: 'busy', cause: err });
    }
    throw err;
  }

  getDirective(orgId: string, agentId: string): Promise<DirectiveEnvelope | null> {
    return this.#pool.run({ db: this.#db, op: 'directive', orgId, agentId } satisfies StoreReadTask);
  }

  /** Queue depth now and busy rejections so far (see {@link StoreReadStats}). */
  stats(): StoreReadStats {
    return { queueSize: this.#pool.queueSize, busyRejections: this.#busyRejections };
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}
