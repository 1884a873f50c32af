/**
 * The memory service client in a thread of its own (SPEC §1 isolation rule, §4.1; issue 9). On the event
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
import { projectRoot } from '../pool/worker-file.js';
import { BranchError, type BranchErrorCode, BranchErrors } from './branch-error.js';
import type { HttpMemorySourceOptions } from './memory-http.js';
import type { MemorySource } from './retrieve.js';
import type { ValidatedHits } from './validate.js';

/** What the memory-fetch thread is built with (its `workerData`): the HTTP client's options. */
export type MemoryFetchConfig = Omit<HttpMemorySourceOptions, 'decoder'>;

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
    const url = new URL(config.baseUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError('memory base URL must be http or https');
    }
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
    });
    return this.#pool;
  }
}
