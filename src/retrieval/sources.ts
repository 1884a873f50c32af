/** Builds the sources (contract.md §3, §4.3): HTTP, else PostgreSQL, else embedded; Redis for directives. */
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

export interface CreateSourcesOptions {
  /** Connection warnings (Redis outages, …). Default: dropped. */
  logger?: RetrievalLogger;
}

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
  // `busy` is the store-read threads' own refusal, not SQLite's SQLITE_BUSY: say so in the branch detail.
  throw BranchErrors.unavailable('embedded store', code === 'busy' ? 'busy: read queue full' : code, err);
}

/** Inclusion counts go to a store-read thread when there is one. */
function embeddedFeedback(store: EmbeddedStore, writes: PooledStoreReads | undefined): FeedbackStore {
  if (writes === undefined) return store;
  return {
    recordFeedback: (orgId, memoryIds, kind) => store.recordFeedback(orgId, memoryIds, kind),
    addInclusions: (rows) => writes.addInclusions(rows),
  };
}

/** Scoped by org AND agent (contract.md §4.3). */
export class EmbeddedMemorySource implements MemorySource {
  readonly #store: StoreReads;
  constructor(store: EmbeddedStore | StoreReads) {
    this.#store = store instanceof EmbeddedStore ? inProcessReads(store) : store;
  }
  /** Synchronous when cached or in-process; @throws BranchError `embedded store unavailable (<code>)`. */
  hot(orgId: string, agentId: string, signal: AbortSignal): RawHits | Promise<RawHits> {
    signal.throwIfAborted();
    return settleRead(() => this.#store.hot(orgId, agentId));
  }
  /** Throws as {@link EmbeddedMemorySource.hot}. */
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
  async close(): Promise<void> {}
}

export class EmbeddedDirectiveSource implements DirectiveSource {
  readonly #store: StoreReads;
  constructor(store: EmbeddedStore | StoreReads) {
    this.#store = store instanceof EmbeddedStore ? inProcessReads(store) : store;
  }
  /** @throws BranchError `bad directive: …` or `embedded store unavailable (<code>)`. */
  get(orgId: string, agentId: string, signal: AbortSignal): Directive | null | Promise<Directive | null> {
    signal.throwIfAborted();
    const envelope = settleRead(() => this.#store.getDirective(orgId, agentId));
    if (envelope instanceof Promise)
      return envelope.then((e) => (e === null ? null : parseDirectiveObject(e)));
    return envelope === null ? null : parseDirectiveObject(envelope);
  }
  async close(): Promise<void> {}
}

/** Hot read from the cache, else from a store-read thread. */
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
 * Redis waits ≤ 1 s for a first connection and never fails start-up when unreachable.
 * @throws when the embedded store cannot be opened, a URL is bad, or PostgreSQL cannot be reached.
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
  // Migrated before any read; replicas starting together serialise on an advisory lock.
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
  // Opened first so the schema exists before the read threads connect.
  let store: EmbeddedStore | undefined;
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
      // Hot misses go to a store-read thread too: decoding big contents here would hold the event loop.
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
        ? {
            warmTenants: (agents: number, queries: number) => pgStore!.warmTenants(agents, queries),
            ...(pgStore!.writeStamp() !== undefined ? { rowStamp: () => pgStore!.writeStamp() ?? 0 } : {}),
          }
        : memoryKind === 'embedded'
          ? {
              warmTenants: async (agents: number, queries: number) => store!.warmTenants(agents, queries),
              rowStamp: () => store!.rowStamp(),
            }
          : {}),
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
