/**
 * The memory service client in a thread of its own (docs/design/isolation.md): the event loop gets at most
 * `limit` validated hits as bytes, whatever the memory service sends.
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

export type MemoryFetchConfig = Omit<HttpMemorySourceOptions, 'decoder' | 'onBodyBytes'>;

export interface MemoryFetchTask {
  op: 'hot' | 'search';
  orgId: string;
  agentId: string;
  query: string;
  /** Set to 1 and notified when the branch gives up: the thread aborts the request. */
  cancelled: Int32Array;
}

export type MemoryFetchResult =
  | { ok: true; value: ValidatedHits }
  | { ok: false; code: BranchErrorCode; status: 'error' | 'timeout'; detail: string }
  | { ok: false; code: 'cancelled' };

/** Far more than a 2-core machine's calls in flight: reads wait on sockets, not the CPU. */
const CONCURRENT_READS = 512;

export function resolveMemoryFetchWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'memory-fetch-worker.js');
}

export class ThreadedMemorySource implements MemorySource {
  readonly #config: MemoryFetchConfig;
  readonly #filename: string;
  #pool: Piscina<MemoryFetchTask, MemoryFetchResult> | null = null;

  /** @throws TypeError for a bad `config.baseUrl` (the token crosses once, in `workerData`). */
  constructor(config: MemoryFetchConfig, filename = resolveMemoryFetchWorkerFile()) {
    memoryBaseUrl(config.baseUrl);
    this.#config = config;
    this.#filename = filename;
  }

  /** @throws BranchError; the signal's reason once it aborts. */
  hot(orgId: string, agentId: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#read({ op: 'hot', orgId, agentId, query: '' }, signal);
  }

  search(orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#read({ op: 'search', orgId, agentId, query }, signal);
  }

  warm(): void {
    this.#threads();
  }

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

export const HEAVY_BODY_BYTES = INLINE_BODY_BYTES;
/** ms after an org's last large body seen on the event loop. */
export const HEAVY_HOLD_MS = 30_000;
const MAX_MARKS = 4096;

export interface RoutedMemoryOptions {
  heavyBytes?: number;
  holdMs?: number;
  now?: () => number;
  filename?: string;
}

/**
 * Reads an org on the event loop until its memory service answers a body over {@link HEAVY_BODY_BYTES}, then
 * for {@link HEAVY_HOLD_MS} in the thread: a tenant with heavy memories slows only itself.
 */
export class RoutedMemorySource implements MemorySource {
  readonly #local: HttpMemorySource;
  readonly #thread: ThreadedMemorySource;
  readonly #heavyUntil = new Map<string, number>();
  readonly #heavyBytes: number;
  readonly #holdMs: number;
  readonly #now: () => number;
  #threadReads = 0;

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

  hot(orgId: string, agentId: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#pick(orgId).hot(orgId, agentId, signal);
  }

  search(orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<ValidatedHits> {
    return this.#pick(orgId).search(orgId, agentId, query, signal);
  }

  isHeavy(orgId: string): boolean {
    const until = this.#heavyUntil.get(orgId);
    return until !== undefined && this.#now() < until;
  }

  get threadReads(): number {
    return this.#threadReads;
  }

  stats(): MemoryThreadStats {
    const now = this.#now();
    let heavyOrgs = 0;
    for (const until of this.#heavyUntil.values()) if (until > now) heavyOrgs++;
    return { threadReads: this.#threadReads, heavyOrgs };
  }

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
