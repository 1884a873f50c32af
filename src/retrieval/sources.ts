/**
 * Chooses and builds the retrieval sources from settings (SPEC §3, §4.3): the memory service over HTTP
 * when a base URL is set, else the embedded store; Redis for directives when a URL is set, else the
 * embedded store's directives. The embedded store is opened once and shared by both.
 */
import type { Settings } from '../config/settings.js';
import type { Directive } from '../types.js';
import { BranchErrors } from './branch-error.js';
import { parseDirectiveObject } from './directive.js';
import { RedisDirectiveSource } from './directive-redis.js';
import { EmbeddedStore } from './embedded-store.js';
import { type RetrievalLogger, silentLogger } from './logger.js';
import { HttpMemorySource } from './memory-http.js';
import type { DirectiveSource, MemorySource } from './retrieve.js';
import { inProcessReads, PooledStoreReads, type StoreReadStats, type StoreReads } from './store-reader.js';
import type { RawHits } from './validate.js';

/** The sources one service instance reads from. */
export interface RetrievalSources {
  directive: DirectiveSource;
  memory: MemorySource;
  /** Closes every source and the embedded store; idempotent. */
  close(): Promise<void>;
  kind: { memory: 'http' | 'embedded'; directive: 'redis' | 'embedded' };
  /** Store-read thread figures for metrics; absent without store-read threads (issue 11 item 6). */
  storeReads?: () => StoreReadStats;
}

/** Options of {@link createSources}. */
export interface CreateSourcesOptions {
  /** Where connection warnings go (Redis outages, …). Default: dropped. */
  logger?: RetrievalLogger;
}

function storeFailure(err: unknown): never {
  const code =
    typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : 'error';
  throw BranchErrors.unavailable('embedded store', code, err);
}

/** {@link MemorySource} on the embedded store, scoped by org AND agent (SPEC §4.3). */
export class EmbeddedMemorySource implements MemorySource {
  readonly #store: StoreReads;
  /** @param store an open store (in-process reads) or store-read threads ({@link PooledStoreReads}). */
  constructor(store: EmbeddedStore | StoreReads) {
    this.#store = store instanceof EmbeddedStore ? inProcessReads(store) : store;
  }
  /**
   * `EmbeddedStore.hot` (limit 20, similarity = confidence). Synchronous underneath (sub-ms), so the
   * signal is only checked before the read.
   * @throws BranchError `embedded store unavailable (<code>)` when SQLite fails.
   */
  async hot(orgId: string, agentId: string, signal: AbortSignal): Promise<RawHits> {
    signal.throwIfAborted();
    try {
      return await this.#store.hot(orgId, agentId);
    } catch (err) {
      storeFailure(err);
    }
  }
  /** `EmbeddedStore.search` (FTS5, limit 10, BM25 similarity). Throws as {@link EmbeddedMemorySource.hot}. */
  async search(orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<RawHits> {
    signal.throwIfAborted();
    try {
      return await this.#store.search(orgId, agentId, query, signal);
    } catch (err) {
      storeFailure(err);
    }
  }
  /** The store is owned by whoever opened it (see {@link createSources}). */
  async close(): Promise<void> {}
}

/** {@link DirectiveSource} on the embedded store, with the same SPEC §4.2 rules as Redis values. */
export class EmbeddedDirectiveSource implements DirectiveSource {
  readonly #store: StoreReads;
  /** @param store an open store (in-process reads) or store-read threads ({@link PooledStoreReads}). */
  constructor(store: EmbeddedStore | StoreReads) {
    this.#store = store instanceof EmbeddedStore ? inProcessReads(store) : store;
  }
  /**
   * @returns the directive, or `null` when none is stored or its content is empty.
   * @throws BranchError `bad directive: …` (SPEC §4.2) or `embedded store unavailable (<code>)`.
   */
  async get(orgId: string, agentId: string, signal: AbortSignal): Promise<Directive | null> {
    signal.throwIfAborted();
    let envelope: ReturnType<EmbeddedStore['getDirective']>;
    try {
      envelope = await this.#store.getDirective(orgId, agentId);
    } catch (err) {
      storeFailure(err);
    }
    return envelope === null ? null : parseDirectiveObject(envelope);
  }
  async close(): Promise<void> {}
}

/**
 * Builds the sources for `settings`:
 * - memory: {@link HttpMemorySource} when `settings.memoryBaseUrl` is set (token `memoryApiToken`, undici
 *   timeouts = the branch timeouts), else {@link EmbeddedMemorySource} on `settings.embeddedDb`;
 * - directive: {@link RedisDirectiveSource} when `settings.redisUrl` is set (waits ≤ 1 s for a first
 *   connection, never fails for an unreachable Redis), else {@link EmbeddedDirectiveSource}.
 * @throws SqliteError when the embedded store is needed and cannot be opened; TypeError for a bad URL.
 */
export async function createSources(
  settings: Settings,
  options: CreateSourcesOptions = {},
): Promise<RetrievalSources> {
  const logger = options.logger ?? silentLogger;
  const needsStore = settings.memoryBaseUrl === '' || settings.redisUrl === '';
  // Opened here first so the schema exists before the read threads connect; kept for the process's life.
  const store = needsStore ? EmbeddedStore.open(settings.embeddedDb) : undefined;
  let reads: StoreReads | undefined;
  let memory: MemorySource | undefined;
  let pooledStats: (() => StoreReadStats) | undefined;
  try {
    if (store) {
      // Directive and hot reads are index lookups (tens to hundreds of µs) and stay in-process; FTS5
      // search costs about a millisecond and goes to the store-read threads, off the event loop.
      const local = inProcessReads(store);
      if (settings.embeddedReadThreads > 0) {
        const pooled = await PooledStoreReads.start(settings.embeddedDb, settings.embeddedReadThreads);
        pooledStats = () => pooled.stats();
        reads = {
          ...local,
          search: (o, a, q, signal) => pooled.search(o, a, q, signal),
          close: () => pooled.close(),
        };
      } else {
        reads = local;
      }
    }
    memory =
      settings.memoryBaseUrl !== ''
        ? new HttpMemorySource({
            baseUrl: settings.memoryBaseUrl,
            token: settings.memoryApiToken,
            hotTimeoutMs: settings.hotTimeoutMs,
            coldTimeoutMs: settings.coldTimeoutMs,
          })
        : new EmbeddedMemorySource(reads!);
    const directive: DirectiveSource =
      settings.redisUrl !== ''
        ? await RedisDirectiveSource.connect({ url: settings.redisUrl, logger })
        : new EmbeddedDirectiveSource(reads!);
    let closed = false;
    const mem = memory;
    return {
      memory: mem,
      directive,
      storeReads: pooledStats,
      kind: {
        memory: settings.memoryBaseUrl !== '' ? 'http' : 'embedded',
        directive: settings.redisUrl !== '' ? 'redis' : 'embedded',
      },
      async close() {
        if (closed) return;
        closed = true;
        await Promise.allSettled([mem.close(), directive.close(), reads?.close()]);
        store?.close();
      },
    };
  } catch (err) {
    await memory?.close();
    await reads?.close();
    store?.close();
    throw err;
  }
}
