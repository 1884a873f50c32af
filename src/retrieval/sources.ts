/**
 * Chooses and builds the retrieval sources from settings (contract.md §3, §4.3): the memory service over HTTP
 * when a base URL is set, else PostgreSQL when its URL is set, else the embedded store; Redis
 * for directives when a URL is set, else the store serving memories (PostgreSQL or embedded; with a
 * memory service and no Redis, PostgreSQL when set, else embedded). Each store is opened once and shared.
 */
import type { Settings } from '../config/settings.js';
import type { MemoryContent } from '../text/content-bytes.js';
import type { Directive } from '../wire/types.js';
import { BranchErrors } from './branch-error.js';
import { parseDirectiveObject } from './directive.js';
import type { FeedbackStore } from './feedback.js';
import { HttpMemorySource } from './http/memory-http.js';
import { RoutedMemorySource } from './http/memory-http-thread.js';
import { type RetrievalLogger, silentLogger } from './logger.js';
import type { DirectiveSource, MemorySource, RetrievalSources, SourceHits, StoreReadStats } from './ports.js';
import { PgDirectiveSource, PgMemorySource } from './postgres/pg-sources.js';
import { PgStore } from './postgres/pg-store.js';
import { RedisDirectiveSource } from './redis/directive-redis.js';
import { EmbeddedStore, type StoreHit } from './sqlite/embedded-store.js';
import { inProcessReads, PooledStoreReads, type StoreReads } from './sqlite/store-reader.js';
import type { RawHits } from './validate.js';

export type { RetrievalSources } from './ports.js';

/** Options of {@link createSources}. */
export interface CreateSourcesOptions {
  /** Where connection warnings go (Redis outages, …). Default: dropped. */
  logger?: RetrievalLogger;
}

/** A store read's answer as it comes (value or promise), its failures turned into BranchErrors. */
function settleRead<T>(read: () => T | Promise<T>): T | Promise<T> {
  let answer: T | Promise<T>;
  try {
    answer = read();
  } catch (err) {
    storeFailure(err);
  }
  return answer instanceof Promise ? answer.catch(storeFailure) : answer;
}

function storeFailure(err: unknown): never {
  const code =
    typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : 'error';
  throw BranchErrors.unavailable('embedded store', code, err);
}

/**
 * The embedded store's feedback writes: RecordMemoryFeedback on the store (its answer is awaited by
 * the caller), inclusion counts in a store-read thread when there is one (`writes`).
 */
function embeddedFeedback(store: EmbeddedStore, writes: PooledStoreReads | undefined): FeedbackStore {
  if (writes === undefined) return store;
  return {
    recordFeedback: (orgId, memoryIds, kind) => store.recordFeedback(orgId, memoryIds, kind),
    addInclusions: (rows) => writes.addInclusions(rows),
  };
}

/** {@link MemorySource} on the embedded store, scoped by org AND agent (contract.md §4.3). */
export class EmbeddedMemorySource implements MemorySource {
  readonly #store: StoreReads;
  /** @param store an open store (in-process reads) or store-read threads ({@link PooledStoreReads}). */
  constructor(store: EmbeddedStore | StoreReads) {
    this.#store = store instanceof EmbeddedStore ? inProcessReads(store) : store;
  }
  /**
   * `EmbeddedStore.hot` (limit 20, similarity = confidence). Answers synchronously when the read is
   * served from the store's cache or in-process (no promise for it), else with a promise from a
   * store-read thread; the signal is only checked before the read.
   * @throws BranchError `embedded store unavailable (<code>)` when SQLite fails (thrown or rejected).
   */
  hot(orgId: string, agentId: string, signal: AbortSignal): RawHits | Promise<RawHits> {
    signal.throwIfAborted();
    return settleRead(() => this.#store.hot(orgId, agentId));
  }
  /**
   * `EmbeddedStore.search` (FTS5, `limit` hits, default 10, BM25 similarity). Throws as
   * {@link EmbeddedMemorySource.hot}.
   */
  search(
    orgId: string,
    agentId: string,
    query: string,
    signal: AbortSignal,
    limit?: number,
  ): SourceHits | Promise<SourceHits> {
    signal.throwIfAborted();
    return settleRead(() => this.#store.search(orgId, agentId, query, signal, limit));
  }
  /** The store is owned by whoever opened it (see {@link createSources}). */
  async close(): Promise<void> {}
}

/** {@link DirectiveSource} on the embedded store, with the same contract.md §4.2 rules as Redis values. */
export class EmbeddedDirectiveSource implements DirectiveSource {
  readonly #store: StoreReads;
  /** @param store an open store (in-process reads) or store-read threads ({@link PooledStoreReads}). */
  constructor(store: EmbeddedStore | StoreReads) {
    this.#store = store instanceof EmbeddedStore ? inProcessReads(store) : store;
  }
  /**
   * @returns the directive, or `null` when none is stored or its content is empty.
   * @throws BranchError `bad directive: …` (contract.md §4.2) or `embedded store unavailable (<code>)`.
   */
  get(orgId: string, agentId: string, signal: AbortSignal): Directive | null | Promise<Directive | null> {
    signal.throwIfAborted();
    const envelope = settleRead(() => this.#store.getDirective(orgId, agentId));
    // A cached directive (the common case) is parsed and returned synchronously.
    if (envelope instanceof Promise)
      return envelope.then((e) => (e === null ? null : parseDirectiveObject(e)));
    return envelope === null ? null : parseDirectiveObject(envelope);
  }
  async close(): Promise<void> {}
}

/** Hot read from the main store's cache, else from a store-read thread (cached on return). */
function hotThroughCache(
  store: EmbeddedStore,
  pooled: PooledStoreReads,
  orgId: string,
  agentId: string,
): readonly StoreHit<MemoryContent>[] | Promise<readonly StoreHit<MemoryContent>[]> {
  const { hits, generation } = store.cachedHot(orgId, agentId);
  if (hits !== undefined) return hits;
  return pooled.hot(orgId, agentId).then(
    (fresh) => {
      store.cacheHot(orgId, agentId, fresh, generation);
      return fresh;
    },
    (err: unknown) => {
      if ((err as { code?: unknown })?.code === 'busy') return store.hot(orgId, agentId);
      throw err;
    },
  );
}

/**
 * Builds the sources for `settings`:
 * - memory: {@link RoutedMemorySource} when `settings.memoryBaseUrl` is set (orgs with large bodies
 *   read in the memory-fetch thread; {@link HttpMemorySource}, all on the event loop, with
 *   `memoryHttpThread` false; token `memoryApiToken`, undici timeouts = the branch timeouts), else
 *   {@link PgMemorySource} when `settings.postgres.url` is set, else
 *   {@link EmbeddedMemorySource} on `settings.embeddedDb`;
 * - directive: {@link RedisDirectiveSource} when `settings.redisUrl` is set (waits ≤ 1 s for a first
 *   connection, never fails for an unreachable Redis), else {@link PgDirectiveSource} when PostgreSQL is
 *   set, else {@link EmbeddedDirectiveSource}.
 * @throws SqliteError when the embedded store is needed and cannot be opened; TypeError for a bad URL;
 *   the connection or migration error when PostgreSQL is needed and cannot be reached (start-up fails).
 */
export async function createSources(
  settings: Settings,
  options: CreateSourcesOptions = {},
): Promise<RetrievalSources> {
  const logger = options.logger ?? silentLogger;
  const usePg = settings.postgres.url !== '';
  const memoryKind = settings.memoryBaseUrl !== '' ? 'http' : usePg ? 'postgres' : 'embedded';
  const directiveKind = settings.redisUrl !== '' ? 'redis' : usePg ? 'postgres' : 'embedded';
  const needsStore = memoryKind === 'embedded' || directiveKind === 'embedded';
  // Migrated here, before any read; replicas starting together serialise on an advisory lock.
  const pgStore =
    memoryKind === 'postgres' || directiveKind === 'postgres'
      ? await PgStore.open({
          url: settings.postgres.url,
          schema: settings.postgres.schema,
          poolMax: settings.postgres.poolMax,
          poolMin: settings.postgres.poolMin,
          statementTimeoutMs: settings.postgres.statementTimeoutMs,
          transactionPooler: settings.postgres.transactionPooler,
          ...(settings.postgres.listenUrl !== '' ? { listenUrl: settings.postgres.listenUrl } : {}),
          onIdleError: (err) =>
            logger.warn({ code: (err as { code?: unknown }).code }, 'postgres idle connection lost'),
        })
      : undefined;
  const pgTimes = {
    directiveMs: settings.directiveTimeoutMs,
    hotMs: settings.hotTimeoutMs,
    coldMs: settings.coldTimeoutMs,
    wallMs: settings.wallMs,
  };
  // Opened here first so the schema exists before the read threads connect; kept for the process's life.
  let store: EmbeddedStore | undefined;
  // With store-read threads, inclusion counts are written there, off the event loop.
  let inclusionWrites: PooledStoreReads | undefined;
  let reads: StoreReads | undefined;
  let memory: MemorySource | undefined;
  let pooledStats: (() => StoreReadStats) | undefined;
  try {
    store = needsStore
      ? EmbeddedStore.open(settings.embeddedDb, { maxMemoryChars: settings.maxMemoryChars })
      : undefined;
    if (store) {
      const opened = store;
      // Directives and hot reads are served from the store's read cache on this thread (a map lookup
      // after a write check, read-cache.ts). A hot miss (first read, or after a write) is read
      // in a store-read thread like every FTS5 search: 20 memories at the 64K cap take tens of ms to
      // decode from SQLite's UTF-8 on this thread, far less to receive as a structured clone
      // (bench:store). Only when that queue is full is the miss read here, as it always was before.
      const neighbours = settings.ranking.neighbourHits;
      const local = inProcessReads(opened, neighbours);
      if (settings.embeddedReadThreads > 0) {
        const pooled = await PooledStoreReads.start(
          settings.embeddedDb,
          settings.embeddedReadThreads,
          undefined,
          settings.maxMemoryChars,
          neighbours,
        );
        pooledStats = () => pooled.stats();
        inclusionWrites = pooled;
        reads = {
          ...local,
          hot: (o, a) => hotThroughCache(opened, pooled, o, a),
          search: (o, a, q, signal, limit) => pooled.search(o, a, q, signal, limit),
          close: () => pooled.close(),
        };
      } else {
        reads = local;
      }
    }
    const http = {
      baseUrl: settings.memoryBaseUrl,
      token: settings.memoryApiToken,
      hotTimeoutMs: settings.hotTimeoutMs,
      coldTimeoutMs: settings.coldTimeoutMs,
      maxMemoryChars: settings.maxMemoryChars,
    };
    memory =
      memoryKind === 'http'
        ? settings.memoryHttpThread
          ? new RoutedMemorySource(http)
          : new HttpMemorySource(http)
        : memoryKind === 'postgres'
          ? new PgMemorySource(pgStore!, pgTimes, settings.maxMemoryChars, settings.ranking.neighbourHits)
          : new EmbeddedMemorySource(reads!);
    const directive: DirectiveSource =
      directiveKind === 'redis'
        ? await RedisDirectiveSource.connect({ url: settings.redisUrl, logger })
        : directiveKind === 'postgres'
          ? new PgDirectiveSource(pgStore!, pgTimes)
          : new EmbeddedDirectiveSource(reads!);
    // The memory-fetch or body-decoder thread starts now, not inside the first branch timeout.
    if (memory instanceof HttpMemorySource || memory instanceof RoutedMemorySource) memory.warm();
    let closed = false;
    const mem = memory;
    return {
      memory: mem,
      directive,
      storeReads: pooledStats,
      ...(mem instanceof RoutedMemorySource ? { memoryThread: () => mem.stats() } : {}),
      kind: { memory: memoryKind, directive: directiveKind },
      ...(memoryKind === 'postgres'
        ? { feedback: pgStore! }
        : memoryKind === 'embedded'
          ? { feedback: embeddedFeedback(store!, inclusionWrites) }
          : {}),
      async close() {
        if (closed) return;
        closed = true;
        await Promise.allSettled([mem.close(), directive.close(), reads?.close()]);
        store?.close();
        await pgStore?.close();
      },
    };
  } catch (err) {
    await memory?.close();
    await reads?.close();
    store?.close();
    await pgStore?.close();
    throw err;
  }
}
