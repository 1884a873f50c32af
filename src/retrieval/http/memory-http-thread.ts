/**
 * The memory service client in a thread of its own (contract.md §1 isolation rule, §4.1). On the event
 * loop, a noisy org's memory service that answers 5,000 hits or 20 × 300 KB of markup still cost the main
 * thread ~6 ms per call before any decoding (`bench:isolation`, main-thread CPU per noisy memory call):
 * undici's socket reads, the body's chunks and their copy into one buffer, and the GC of all that. Here
 * the whole read — request, body, cap, decode, validation, scoping — runs in one memory-fetch thread
 * ({@link HttpMemorySource} there, decoding inline), and the main thread posts three ids and a query and
 * receives at most `limit` validated hits, their contents as UTF-8 bytes on one transferred buffer
 * (content-bytes.ts). Its work per call is bounded by the limit, whatever the memory service sends.
 *
 * The thread runs many reads at once (they wait on sockets, not on the CPU). A branch that gives up sets
 * its read's shared flag: the thread aborts that HTTP request at once, as the in-process client does on
 * the branch's signal. Errors cross as data (code, status, detail) and become {@link BranchError}s again.
 */
import path from 'node:path';
import { Piscina } from 'piscina';
import { projectRoot } from '../../pool/worker-file.js';
import { monotonicNow } from '../../util/clock.js';
import { BranchError, type BranchErrorCode, BranchErrors } from '../branch-error.js';
import type { MemorySource, MemoryThreadStats } from '../ports.js';

export type { MemoryThreadStats } from '../ports.js';

import type { ValidatedHits } from '../validate.js';
import { INLINE_BODY_BYTES } from './body-decoder.js';
import { HttpMemorySource, type HttpMemorySourceOptions, memoryBaseUrl } from './memory-http.js';

/** What the memory-fetch thread is built with (its `workerData`): the HTTP client's options. */
export type MemoryFetchConfig = Omit<HttpMemorySourceOptions, 'decoder' | 'onBodyBytes'>;

/** One branch read as it crosses to the thread. */
export interface MemoryFetchTask {
  op: 'hot' | 'search';
  orgId: string;
  agentId: string;
  /** The search text (`''` for `hot`). */
  query: string;
  /** Set to 1 and notified by the branch when it gives up: the thread aborts the request. */
  cancelled: Int32Array;
}

/** What the thread answers: the hits, the branch error as data, or that the branch gave up. */
export type MemoryFetchResult =
  | { ok: true; value: ValidatedHits }
  | { ok: false; code: BranchErrorCode; status: 'error' | 'timeout'; detail: string }
  | { ok: false; code: 'cancelled' };

/** Reads the thread runs at once: far more than a 2-core machine's calls in flight at 2,000 req/s. */
const CONCURRENT_READS = 512;

/** Absolute path of the compiled memory-fetch worker (`npm run build`). */
export function resolveMemoryFetchWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'memory-fetch-worker.js');
}

/** {@link MemorySource} over the memory service wire, read in the memory-fetch thread. */
export class ThreadedMemorySource implements MemorySource {
  readonly #config: MemoryFetchConfig;
  readonly #filename: string;
  #pool: Piscina<MemoryFetchTask, MemoryFetchResult> | null = null;

  /**
   * @param config the HTTP client's options (the token crosses to the thread once, in its `workerData`).
   * @param filename worker module; default {@link resolveMemoryFetchWorkerFile}.
   * @throws TypeError when `config.baseUrl` is not an absolute http(s) URL (checked here, not in the thread).
   */
  constructor(config: MemoryFetchConfig, filename = resolveMemoryFetchWorkerFile()) {
    memoryBaseUrl(config.baseUrl);
    this.#config = config;
    this.#filename = filename;
  }

  /** As {@link HttpMemorySource.hot}. @throws BranchError; the signal's reason once it aborts. */
  hot(orgId: string, agentId: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#read({ op: 'hot', orgId, agentId, query: '' }, signal);
  }

  /** As {@link HttpMemorySource.search}. @throws BranchError; the signal's reason once it aborts. */
  search(orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#read({ op: 'search', orgId, agentId, query }, signal);
  }

  /** Starts the thread now (service start-up), so no branch pays for it. */
  warm(): void {
    this.#threads();
  }

  /** Stops the thread; reads in flight are abandoned (nobody waits for them at shutdown). Idempotent. */
  async close(): Promise<void> {
    const pool = this.#pool;
    this.#pool = null;
    await pool?.destroy();
  }

  #read(read: Omit<MemoryFetchTask, 'cancelled'>, signal: AbortSignal): Promise<ValidatedHits> {
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<ValidatedHits>((resolve, reject) => {
      const cancelled = new Int32Array(new SharedArrayBuffer(4));
      const onAbort = () => {
        Atomics.store(cancelled, 0, 1);
        Atomics.notify(cancelled, 0);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      // No signal to piscina: aborting a running task would terminate the thread and every read on it.
      this.#threads()
        .run({ ...read, cancelled })
        .then(
          (result) => {
            signal.removeEventListener('abort', onAbort);
            if (result.ok) resolve(result.value);
            else if (result.code === 'cancelled') reject(signal.reason);
            else reject(new BranchError(result.code, result.status, result.detail));
          },
          (err: unknown) => {
            signal.removeEventListener('abort', onAbort);
            reject(BranchErrors.httpTransport('memory thread', err));
          },
        );
    });
  }

  #threads(): Piscina<MemoryFetchTask, MemoryFetchResult> {
    this.#pool ??= new Piscina<MemoryFetchTask, MemoryFetchResult>({
      filename: this.#filename,
      workerData: this.#config,
      // One thread: its reads wait on sockets; the CPU pool and the event loop need the cores.
      minThreads: 1,
      maxThreads: 1,
      idleTimeout: Number.POSITIVE_INFINITY,
      concurrentTasksPerWorker: CONCURRENT_READS,
      // Its event loop must keep running between reads (keep-alive sockets, timers): no Atomics.wait.
      atomics: 'disabled',
      recordTiming: false,
    });
    return this.#pool;
  }
}

/** Bodies larger than this mark their org heavy: the same bound above which a body is decoded off the loop. */
export const HEAVY_BODY_BYTES = INLINE_BODY_BYTES;
/** How long an org stays heavy after its last large body seen on the event loop, ms. */
export const HEAVY_HOLD_MS = 30_000;
/** Heavy marks kept before expired ones are swept (orgs that never come back). */
const MAX_MARKS = 4096;

/** Options of {@link RoutedMemorySource}. */
export interface RoutedMemoryOptions {
  /** Default {@link HEAVY_BODY_BYTES}. */
  heavyBytes?: number;
  /** Default {@link HEAVY_HOLD_MS}. */
  holdMs?: number;
  /** Monotonic ms clock (tests inject one). */
  now?: () => number;
  /** Memory-fetch worker module; default {@link resolveMemoryFetchWorkerFile}. */
  filename?: string;
}

/**
 * The memory service client that keeps each org's reads where they cost the others least: on
 * the event loop (one thread hop fewer, which matters when the machine is saturated: in `bench:isolation`
 * under every heavy kind, a build that sent every org's reads through the thread lowered the quiet org's
 * L0 from 85–92 % to 80–82 %), until the org's memory service answers a body larger than {@link HEAVY_BODY_BYTES}; for
 * {@link HEAVY_HOLD_MS} after that, that org's reads go to the memory-fetch thread, where receiving its
 * multi-MB bodies costs the event loop nothing. The org then gets one read on the loop again, which marks
 * it anew if its bodies are still large. A tenant with heavy memories slows only itself.
 */
export class RoutedMemorySource implements MemorySource {
  readonly #local: HttpMemorySource;
  readonly #thread: ThreadedMemorySource;
  readonly #heavyUntil = new Map<string, number>();
  readonly #heavyBytes: number;
  readonly #holdMs: number;
  readonly #now: () => number;
  #threadReads = 0;

  /** @throws TypeError when `config.baseUrl` is not an absolute http(s) URL. */
  constructor(config: MemoryFetchConfig, options: RoutedMemoryOptions = {}) {
    this.#heavyBytes = options.heavyBytes ?? HEAVY_BODY_BYTES;
    this.#holdMs = options.holdMs ?? HEAVY_HOLD_MS;
    this.#now = options.now ?? monotonicNow;
    this.#thread = new ThreadedMemorySource(config, options.filename);
    this.#local = new HttpMemorySource({
      ...config,
      onBodyBytes: (orgId, bytes) => {
        if (bytes > this.#heavyBytes) this.#mark(orgId);
      },
    });
  }

  /** As {@link HttpMemorySource.hot}, on the event loop or in the thread (class TSDoc). */
  hot(orgId: string, agentId: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#pick(orgId).hot(orgId, agentId, signal);
  }

  /** As {@link HttpMemorySource.search}, on the event loop or in the thread (class TSDoc). */
  search(orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#pick(orgId).search(orgId, agentId, query, signal);
  }

  /** Whether `orgId`'s reads go to the thread now. */
  isHeavy(orgId: string): boolean {
    const until = this.#heavyUntil.get(orgId);
    return until !== undefined && this.#now() < until;
  }

  /** Reads sent to the memory-fetch thread so far (tests, metrics). */
  get threadReads(): number {
    return this.#threadReads;
  }

  /** Figures for /metrics; counting the heavy orgs walks at most a few thousand marks. */
  stats(): MemoryThreadStats {
    const now = this.#now();
    let heavyOrgs = 0;
    for (const until of this.#heavyUntil.values()) if (until > now) heavyOrgs++;
    return { threadReads: this.#threadReads, heavyOrgs };
  }

  /** Starts both threads now (the body decoder's and the memory-fetch one). */
  warm(): void {
    this.#local.warm();
    this.#thread.warm();
  }

  async close(): Promise<void> {
    await Promise.all([this.#local.close(), this.#thread.close()]);
  }

  #pick(orgId: string): HttpMemorySource | ThreadedMemorySource {
    const until = this.#heavyUntil.get(orgId);
    if (until === undefined) return this.#local;
    if (this.#now() >= until) {
      this.#heavyUntil.delete(orgId);
      return this.#local;
    }
    this.#threadReads++;
    return this.#thread;
  }

  #mark(orgId: string): void {
    const now = this.#now();
    if (this.#heavyUntil.size >= MAX_MARKS && !this.#heavyUntil.has(orgId)) {
      for (const [org, until] of this.#heavyUntil) if (until <= now) this.#heavyUntil.delete(org);
    }
    this.#heavyUntil.set(orgId, now + this.#holdMs);
  }
}
