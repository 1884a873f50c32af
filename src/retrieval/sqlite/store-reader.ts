/**
 * Reads of the embedded store, either in-process (synchronous better-sqlite3, for tools and tests) or in
 * a small Piscina pool of store-read threads (the service), so SQLite never runs on the gRPC event loop.
 *
 * Batching: reads that arrive while every thread is busy (PIPELINE_DEPTH batches each) wait
 * here, fair across orgs, and go to the next free thread together, as one task: one message each way and
 * one thread wake-up for the lot.
 * A wake-up costs ~0.1 ms of CPU on this 2-core VM and a message exchange several syscalls of ~7 µs, so
 * under load a burst of searches costs the messaging of one.
 */
import path from 'node:path';
import { Piscina } from 'piscina';
import { type FairEntry, FairQueue } from '../../pool/fair-queue.js';
import { projectRoot } from '../../pool/worker-file.js';
import type { MemoryContent } from '../../text/content-bytes.js';
import { stackless } from '../../util/stackless.js';
import type { InclusionCount } from '../feedback.js';
import type { SourceHits, StoreReadStats } from '../ports.js';

export type { StoreReadStats } from '../ports.js';

import type { DirectiveEnvelope, EmbeddedStore, StoreHit } from './embedded-store.js';

/** One read. */
export interface StoreRead {
  op: 'hot' | 'search' | 'directive';
  orgId: string;
  agentId: string;
  query?: string;
  /** Most search hits (default 10). */
  limit?: number;
  /** Search: best hits whose dialogue neighbours are read too (retrieval/neighbours.ts; default 0). */
  neighbours?: number;
}

/** What crosses to a store-read thread: the reads that waited for it, answered in one exchange. */
export interface StoreReadBatch {
  db: string;
  /** Content cap, code points (`IBEX_CONTEXT_MAX_MEMORY_CHARS`): longer rows come back `oversize`. */
  maxChars?: number;
  reads: StoreRead[];
  /**
   * Inclusion counts to add (`EmbeddedStore.addInclusions`, at most INCLUSION_BATCH rows), on a batch of
   * their own: the write and the WAL checkpoints it triggers run on the thread's connection, never on the
   * event loop.
   */
  inclusions?: InclusionCount[];
}

/** One read's answer; a failure keeps its SQLite `code` (a cloned Error would lose it). */
export type StoreReadAnswer = { ok: true; value: unknown } | { ok: false; code: string; message: string };

/** A batch's answers, in order, and how long the thread spent on them. */
export interface StoreReadReply {
  answers: StoreReadAnswer[];
  /**
   * The store-read thread's own time on the batch, ms. The queue limit is sized from it, not from the
   * round trip: a busy event loop that reads the reply late would otherwise look like a slow store, and
   * the limit would shrink to refuse reads the thread had time for (at 1,000 req/s on a loaded machine,
   * 37 % of calls were answered L1 `cold_error` by a store thread that was 35 % busy).
   */
  runMs: number;
  /** Rows an `inclusions` batch updated. */
  changes?: number;
}

/**
 * The reads the embedded sources need; sync or async. Hits read by a store-read thread carry their
 * contents as UTF-8 bytes (content-bytes.ts), in-process ones as text.
 */
export interface StoreReads {
  /** A frozen answer may be shared (the read cache's): it is never to be mutated. */
  hot(
    orgId: string,
    agentId: string,
  ): readonly StoreHit<MemoryContent>[] | Promise<readonly StoreHit<MemoryContent>[]>;
  /**
   * @param signal the branch's signal: once it aborts the read may be skipped.
   * @returns raw hits (in-process), or hits a store-read thread validated and scoped (contract.md §4.1).
   */
  search(
    orgId: string,
    agentId: string,
    query: string,
    signal?: AbortSignal,
    limit?: number,
  ): SourceHits | Promise<SourceHits>;
  getDirective(orgId: string, agentId: string): DirectiveEnvelope | null | Promise<DirectiveEnvelope | null>;
  close(): Promise<void>;
}

/** Absolute path of the compiled store-read worker (`npm run build`). */
export function resolveStoreWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'store-worker.js');
}

/**
 * In-process reads on an open store (the caller owns and closes the store).
 * @param neighbours searches read the dialogue neighbours of this many best hits (default 0: none).
 */
export function inProcessReads(store: EmbeddedStore, neighbours = 0): StoreReads {
  return {
    hot: (org, agent) => store.hot(org, agent),
    search: (org, agent, query, _signal, limit) =>
      store.search(org, agent, query, limit === undefined ? { neighbours } : { limit, neighbours }),
    getDirective: (org, agent) => store.getDirective(org, agent),
    close: async () => {},
  };
}

/**
 * Expected wait for a thread, ms, past which a read is refused (`busy`): a few ms of a 40 ms wall, so an
 * overloaded store fails its searches at once (an L1 answer) instead of holding every call until its wall.
 */
export const STORE_QUEUE_BUDGET_MS = 8;
/** Fewest reads allowed to wait per thread, whatever the measured read time. */
const MIN_QUEUED_PER_THREAD = 4;
/** Most reads allowed to wait, whatever the measured read time. */
const MAX_QUEUED = 64;
/** Most reads in one batch: the batch answers at once, so its first read waits for its last. */
export const MAX_BATCH = 8;
/**
 * Batches in flight per thread: the next one waits in the thread's port while the current one runs, so the
 * thread goes on to it without waiting for the event loop to read a reply and dispatch again. With one, a
 * late loop left the thread idle while reads piled up and were refused (at 1,000 req/s the thread was 42 %
 * busy while about half the calls' searches were refused `busy`). Bursts that arrive in one late loop turn
 * are still refused past the queue limit (docs/design/embedded-store.md, "Store-read threads").
 */
export const PIPELINE_DEPTH = 2;
/** Weight of the newest batch in the running mean of the time per read. */
const MEAN_WEIGHT = 0.1;

/**
 * How many reads may wait: {@link STORE_QUEUE_BUDGET_MS} of the threads' measured time per read each,
 * at least 4 per thread (a burst must not be refused because a cold start measured slowly) and at most 64.
 * Until a read is measured the mean is taken as budget / 4: 4 per thread.
 * @param meanReadMs measured thread time per read (a batch's {@link StoreReadReply.runMs} / its reads), ms.
 */
export function storeQueueLimit(meanReadMs: number, threads: number): number {
  const fit = Math.floor((STORE_QUEUE_BUDGET_MS * threads) / Math.max(meanReadMs, 1e-3));
  return Math.min(MAX_QUEUED, Math.max(MIN_QUEUED_PER_THREAD * threads, fit));
}

interface PendingRead extends FairEntry {
  read: StoreRead;
  signal: AbortSignal | undefined;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

function answerError(answer: { code: string; message: string }): Error {
  return Object.assign(new Error(answer.message), { code: answer.code });
}

/**
 * Reads in `threads` store-read threads, each with its own connection to the WAL database `db`.
 * No AbortSignal is passed to piscina: aborting a running task terminates its thread. A read whose branch
 * gave up while it waited is answered `[]` without running; one already on a thread finishes unread.
 */
export class PooledStoreReads implements StoreReads {
  readonly #pool: Piscina<StoreReadBatch, StoreReadReply>;
  readonly #db: string;
  readonly #threads: number;
  readonly #maxChars: number | undefined;
  readonly #neighbours: number;
  /** Searches waiting. */
  readonly #queue = new FairQueue<PendingRead>();
  /**
   * Hot reads and directives waiting: a few rows each, under the branches' short timeouts, so they go
   * to the thread before any waiting search and never share a batch with one.
   */
  readonly #cheap = new FairQueue<PendingRead>();
  #running = 0;
  #meanReadMs = STORE_QUEUE_BUDGET_MS / MIN_QUEUED_PER_THREAD;
  #busyRejections = 0;

  private constructor(
    pool: Piscina<StoreReadBatch, StoreReadReply>,
    db: string,
    threads: number,
    maxChars: number | undefined,
    neighbours: number,
  ) {
    this.#pool = pool;
    this.#db = db;
    this.#threads = threads;
    this.#maxChars = maxChars;
    this.#neighbours = neighbours;
  }

  /**
   * Starts the threads and opens each one's connection before resolving.
   * @param maxChars content cap of every read, code points (default the store's, 65536).
   * @param neighbours searches read the dialogue neighbours of this many best hits (default 0: none).
   * @throws the worker's error when the database cannot be opened.
   */
  static async start(
    db: string,
    threads: number,
    filename = resolveStoreWorkerFile(),
    maxChars?: number,
    neighbours = 0,
  ): Promise<PooledStoreReads> {
    const pool = new Piscina<StoreReadBatch, StoreReadReply>({
      filename,
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      // better-sqlite3 is synchronous: a second task waits in the thread's port behind the first, which is
      // the point (PIPELINE_DEPTH).
      concurrentTasksPerWorker: PIPELINE_DEPTH,
      recordTiming: false,
    });
    const reads = new PooledStoreReads(pool, path.resolve(db), threads, maxChars, neighbours);
    const warm = '00000000-0000-4000-8000-000000000000';
    await Promise.all(Array.from({ length: threads }, () => reads.getDirective(warm, warm)));
    return reads;
  }

  hot(orgId: string, agentId: string): Promise<StoreHit<MemoryContent>[]> {
    return this.#read({ op: 'hot', orgId, agentId }, undefined) as Promise<StoreHit<MemoryContent>[]>;
  }

  /**
   * The thread validates and scopes the hits itself (`validateHits`, limit 10, this reader's content cap),
   * so the answer is `ValidatedHits` (retrieve.ts); `[]` when the signal aborted before the read.
   */
  search(
    orgId: string,
    agentId: string,
    query: string,
    signal?: AbortSignal,
    limit?: number,
  ): Promise<SourceHits> {
    const neighbours = this.#neighbours;
    const read: StoreRead =
      limit === undefined
        ? { op: 'search', orgId, agentId, query, neighbours }
        : { op: 'search', orgId, agentId, query, limit, neighbours };
    return this.#read(read, signal) as Promise<SourceHits>;
  }

  getDirective(orgId: string, agentId: string): Promise<DirectiveEnvelope | null> {
    return this.#read({ op: 'directive', orgId, agentId }, undefined) as Promise<DirectiveEnvelope | null>;
  }

  /**
   * Queues one read and starts a batch if a thread is free.
   * @throws (rejects) Error code `busy` at once when the queue is full, unless another org has at least
   *   two more reads waiting: then that org's newest read is refused instead.
   */
  #read(read: StoreRead, signal: AbortSignal | undefined): Promise<unknown> {
    if (signal?.aborted) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      // Links written out, not `...unqueued()`: properties added after a spread are slow in V8 11.
      const pending: PendingRead = {
        fqPrev: null,
        fqNext: null,
        fqLine: null,
        read,
        signal,
        resolve,
        reject,
      };
      const limit = storeQueueLimit(this.#meanReadMs, this.#threads);
      const queue = read.op === 'search' ? this.#queue : this.#cheap;
      if (this.#running >= this.#threads * PIPELINE_DEPTH && this.#queue.size + this.#cheap.size >= limit) {
        const victim = queue.shedFor(read.orgId);
        if (victim === null) {
          this.#refuse(pending);
          return;
        }
        this.#refuse(victim);
      }
      queue.push(read.orgId, pending);
      this.#pump();
    });
  }

  #refuse(pending: PendingRead): void {
    this.#busyRejections++;
    // Refusals come by the thousand when the store falls behind: no stack (util/stackless.ts).
    pending.reject(stackless(() => Object.assign(new Error('store-read queue full'), { code: 'busy' })));
  }

  /**
   * Sends what waits to the threads, up to {@link PIPELINE_DEPTH} tasks a thread, round-robin across orgs:
   * hot reads and directives first, in batches of their own; up to {@link MAX_BATCH} reads a task.
   */
  #pump(): void {
    while (this.#running < this.#threads * PIPELINE_DEPTH && this.#queue.size + this.#cheap.size > 0) {
      const queue = this.#cheap.size > 0 ? this.#cheap : this.#queue;
      const batch: PendingRead[] = [];
      while (batch.length < MAX_BATCH && queue.size > 0) {
        const next = queue.shift()!;
        // Its branch gave up while it waited: nobody will look at the answer.
        if (next.signal?.aborted) next.resolve([]);
        else batch.push(next);
      }
      if (batch.length > 0) this.#dispatch(batch);
    }
  }

  #dispatch(batch: PendingRead[]): void {
    this.#running++;
    const task: StoreReadBatch = { db: this.#db, maxChars: this.#maxChars, reads: batch.map((p) => p.read) };
    this.#pool.run(task).then(
      ({ answers, runMs }) => {
        this.#done(runMs, batch.length);
        for (let i = 0; i < batch.length; i++) {
          const answer = answers[i]!;
          if (answer.ok) batch[i]!.resolve(answer.value);
          else batch[i]!.reject(answerError(answer));
        }
      },
      (err: unknown) => {
        this.#done(null, batch.length);
        for (const p of batch) p.reject(err);
      },
    );
  }

  /**
   * Adds inclusion counts in a store-read thread (one statement, at most INCLUSION_BATCH rows): a write
   * of 500 rows took 2 ms, its WAL checkpoint up to 12 ms, which on the event loop delayed every call
   * in flight. The batch takes a thread slot like a read batch; reads queue behind it as usual.
   * @returns rows updated.
   * @throws (rejects) the thread's SQLite error (code kept), or the pool's.
   */
  addInclusions(rows: readonly InclusionCount[]): Promise<number> {
    if (rows.length === 0) return Promise.resolve(0);
    this.#running++;
    const task: StoreReadBatch = { db: this.#db, reads: [], inclusions: rows.slice() };
    return this.#pool.run(task).then(
      (reply) => {
        this.#done(null, 0);
        const failed = reply.answers[0];
        if (failed !== undefined && !failed.ok) throw answerError(failed);
        return reply.changes ?? 0;
      },
      (err: unknown) => {
        this.#done(null, 0);
        throw err;
      },
    );
  }

  /** @param runMs the thread's time on the batch; `null` when the task failed (nothing learnt). */
  #done(runMs: number | null, reads: number): void {
    this.#running--;
    if (runMs !== null) this.#meanReadMs += MEAN_WEIGHT * (runMs / reads - this.#meanReadMs);
    this.#pump();
  }

  /** Queue depth now and busy rejections so far (see {@link StoreReadStats}). */
  stats(): StoreReadStats {
    return { queueSize: this.#queue.size + this.#cheap.size, busyRejections: this.#busyRejections };
  }

  /** Refuses what still waits, then stops the threads. */
  async close(): Promise<void> {
    for (const p of [...this.#cheap.drain(), ...this.#queue.drain()]) this.#refuse(p);
    await this.#pool.destroy();
  }
}
