/** Embedded-store reads, in-process or batched to store-read threads (docs/design/embedded-store.md). */
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
import { isPackedHits, unpackHits } from './packed-hits.js';

export interface StoreRead {
  op: 'hot' | 'search' | 'directive';
  orgId: string;
  agentId: string;
  query?: string;
  limit?: number;
  neighbours?: number;
}

export interface StoreReadBatch {
  db: string;
  /** Code points; longer rows come back `oversize`. */
  maxChars?: number;
  reads: StoreRead[];
  /** Inclusion counts, in a batch of their own: the write stays off the event loop. */
  inclusions?: InclusionCount[];
}

/** A failure keeps its SQLite `code` (a cloned Error would lose it). */
export type StoreReadAnswer = { ok: true; value: unknown } | { ok: false; code: string; message: string };

export interface StoreReadReply {
  answers: StoreReadAnswer[];
  /** The thread's own time on the batch, ms; sizes the queue limit. */
  runMs: number;
  changes?: number;
}

/** Thread-read hits carry contents as UTF-8 bytes. */
export interface StoreReads {
  /** A frozen answer may be shared: never mutate it. */
  hot(
    orgId: string,
    agentId: string,
  ): readonly StoreHit<MemoryContent>[] | Promise<readonly StoreHit<MemoryContent>[]>;
  /** Hits scoped to the org and agent (`EmbeddedStore.searchHits`); skipped once `signal` aborts. */
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

export function resolveStoreWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'store-worker.js');
}

export function inProcessReads(store: EmbeddedStore, neighbours = 0): StoreReads {
  return {
    hot: (org, agent) => store.hot(org, agent),
    search: (org, agent, query, _signal, limit) =>
      store.searchHits(org, agent, query, limit === undefined ? { neighbours } : { limit, neighbours }),
    getDirective: (org, agent) => store.getDirective(org, agent),
    close: async () => {},
  };
}

/** Expected wait, ms, past which a read is refused `busy` (an L1 answer) rather than held until the wall. */
export const STORE_QUEUE_BUDGET_MS = 8;
const MIN_QUEUED_PER_THREAD = 4;
const MAX_QUEUED = 64;
export const MAX_BATCH = 8;
/** A second batch waits in the thread's port, so a late event loop does not idle the thread. */
export const PIPELINE_DEPTH = 2;
const MEAN_WEIGHT = 0.1;

/** {@link STORE_QUEUE_BUDGET_MS} of measured time per read, at least 4 per thread, at most 64. */
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
 * Reads in store-read threads, one connection each. No AbortSignal goes to piscina (aborting a task kills
 * its thread): a read whose branch gave up while queued is answered `[]` without running.
 */
export class PooledStoreReads implements StoreReads {
  readonly #pool: Piscina<StoreReadBatch, StoreReadReply>;
  readonly #db: string;
  readonly #threads: number;
  readonly #maxChars: number | undefined;
  readonly #neighbours: number;
  /** Searches waiting. */
  readonly #searches = new FairQueue<PendingRead>();
  /** Hot reads and directives: cheap, under short timeouts, so never batched behind searches. */
  readonly #cheap = new FairQueue<PendingRead>();
  #running = 0;
  #meanReadMs = STORE_QUEUE_BUDGET_MS / MIN_QUEUED_PER_THREAD;
  #busyRejections = 0;

  /** Reads waiting, searches and cheap ones. */
  get #waiting(): number {
    return this.#searches.size + this.#cheap.size;
  }

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

  /** @throws the worker's error when the database cannot open. */
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

  /** Validated and scoped in the thread (`ValidatedHits`); `[]` once aborted. */
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

  /** Rejects `busy` when full, unless another org has two more reads waiting (its newest is refused). */
  #read(read: StoreRead, signal: AbortSignal | undefined): Promise<unknown> {
    if (signal?.aborted) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      // Links written out, not spread: properties added after a spread are slow in V8.
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
      const queue = read.op === 'search' ? this.#searches : this.#cheap;
      if (this.#running >= this.#threads * PIPELINE_DEPTH && this.#waiting >= limit) {
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
    // Refusals come by the thousand when the store falls behind: no stack.
    pending.reject(stackless(() => Object.assign(new Error('store-read queue full'), { code: 'busy' })));
  }

  /** Hot reads and directives go first, in batches of their own. */
  #pump(): void {
    while (this.#running < this.#threads * PIPELINE_DEPTH && this.#waiting > 0) {
      const queue = this.#cheap.size > 0 ? this.#cheap : this.#searches;
      const batch: PendingRead[] = [];
      while (batch.length < MAX_BATCH && queue.size > 0) {
        const next = queue.shift()!;
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
          if (answer.ok)
            batch[i]!.resolve(isPackedHits(answer.value) ? unpackHits(answer.value) : answer.value);
          else batch[i]!.reject(answerError(answer));
        }
      },
      (err: unknown) => {
        this.#done(null, batch.length);
        for (const p of batch) p.reject(err);
      },
    );
  }

  /** Off the event loop, like reads (docs/design/retrieval.md); @throws the SQLite error, code kept. */
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

  #done(runMs: number | null, reads: number): void {
    this.#running--;
    if (runMs !== null) this.#meanReadMs += MEAN_WEIGHT * (runMs / reads - this.#meanReadMs);
    this.#pump();
  }

  stats(): StoreReadStats {
    return { queueSize: this.#waiting, busyRejections: this.#busyRejections };
  }

  async close(): Promise<void> {
    for (const p of [...this.#cheap.drain(), ...this.#searches.drain()]) this.#refuse(p);
    await this.#pool.destroy();
  }
}
