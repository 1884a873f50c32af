/** PostgreSQL store (contract.md §4.3) shared by replicas; see docs/postgres.md. */
import type pg from 'pg';
import type { FeedbackKind, FeedbackStore, InclusionCount, UsefulnessUpdate } from '../feedback.js';
import { feedbackUpdates, inclusionBatch } from '../feedback.js';
import { neighbourArg } from '../neighbours.js';
import type { AgentWriter, WarmTenant } from '../ports.js';
import { ReadCache } from '../read-cache.js';
import type { DirectiveEnvelope, DirectiveRow, MemoryRow, StoreHit } from '../store-rows.js';
import { checkAgentRows, checkMemory, uuidArg } from '../store-rows.js';
import { HOT_LIMIT, type ValidatedHits } from '../validate.js';
import { queriesFromContents } from '../warm-memories.js';
import { type MigrateResult, migrate, SCHEMA_NAME_RE } from './migrations.js';
import { PgChangeFeed } from './pg-change-feed.js';
import { PgPool, type PgWork } from './pg-pool.js';
import { NO_CAP, type PgReadOptions, PgReads } from './pg-reads.js';
import { PG_EVENTS } from './pg-stats.js';
import {
  addInclusionCounts,
  applyFeedback,
  insertMemories,
  replaceAgentRows,
  upsertDirective,
} from './pg-writes.js';
import { toWebSearchQuery } from './search-text.js';

export interface PgStoreOptions {
  /** `postgres://…`; never logged (it may hold a password). */
  url: string;
  schema?: string;
  poolMax?: number;
  /** Kept open while idle, opened before `open` resolves. Default 0; at most `poolMax`. */
  poolMin?: number;
  /** Idle close of connections above `poolMin`, ms. Default 30,000. */
  idleTimeoutMs?: number;
  /** Reads' `statement_timeout`, ms (start-up packet). Default 1000; with a pooler, set it on the server. */
  statementTimeoutMs?: number;
  /** Through a transaction-pooling PgBouncer: no start-up options, no LISTEN on `url`. Default false. */
  transactionPooler?: boolean;
  /** Direct URL the change feed LISTENs on; `''` = no read cache. Default: `url` (`''` with a pooler). */
  listenUrl?: string;
  connectTimeoutMs?: number;
  applicationName?: string;
  onIdleError?: (err: Error) => void;
}

/** Longest a cached read is served, ms: bounds stale inclusion counts (they do not notify). */
export const PG_CACHE_MAX_AGE_MS = 10_000;

export class PgStore implements FeedbackStore, AgentWriter {
  readonly schema: string;
  readonly migration: MigrateResult;
  readonly #pool: PgPool;
  readonly #reads: PgReads;
  readonly #feed: PgChangeFeed | undefined;
  readonly #hotCache: ReadCache<readonly StoreHit[]> | undefined;
  readonly #directiveCache: ReadCache<DirectiveEnvelope | null> | undefined;

  private constructor(
    pool: PgPool,
    schema: string,
    migration: MigrateResult,
    feed: PgChangeFeed | undefined,
  ) {
    this.#pool = pool;
    this.schema = schema;
    this.migration = migration;
    this.#reads = new PgReads(pool, schema);
    this.#feed = feed;
    if (feed) {
      this.#hotCache = new ReadCache(feed, { maxAgeMs: PG_CACHE_MAX_AGE_MS });
      this.#directiveCache = new ReadCache(feed, { maxAgeMs: PG_CACHE_MAX_AGE_MS });
    }
  }

  /** Connects, migrates, warms `poolMin` connections, starts the change feed; @throws on any failure. */
  static async open(opts: PgStoreOptions): Promise<PgStore> {
    const schema = opts.schema ?? 'ibex_context';
    if (!SCHEMA_NAME_RE.test(schema)) throw new Error(`invalid PostgreSQL schema name: ${schema}`);
    const max = opts.poolMax ?? 8;
    const min = Math.min(max, opts.poolMin ?? 0);
    const statementTimeoutMs = Math.max(1, Math.ceil(opts.statementTimeoutMs ?? 1000));
    const pooler = opts.transactionPooler ?? false;
    const applicationName = opts.applicationName ?? 'ibex-context';
    const config: pg.PoolConfig = {
      connectionString: opts.url,
      max,
      min,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 1000,
      idleTimeoutMillis: opts.idleTimeoutMs ?? 30_000,
      application_name: applicationName,
      // Once per connection: no round-trip per read, and no SET a pooler could lose.
      ...(pooler ? {} : { options: `-c statement_timeout=${statementTimeoutMs}` }),
      keepAlive: true,
    };
    // A pooler may route a read to a server connection that never saw its PREPARE (PgBouncer < 1.21).
    const pool = new PgPool({
      config,
      min,
      statementTimeoutMs,
      prepared: !pooler,
      onIdleError: opts.onIdleError,
    });
    let feed: PgChangeFeed | undefined;
    try {
      const client = await pool.connect();
      let migration: MigrateResult;
      try {
        migration = await migrate(client, schema);
      } finally {
        client.release();
      }
      const listenUrl = opts.listenUrl ?? (pooler ? '' : opts.url);
      if (listenUrl !== '') feed = await PgChangeFeed.start(listenUrl, schema, applicationName);
      const store = new PgStore(pool, schema, migration, feed);
      await store.warm();
      return store;
    } catch (err) {
      await feed?.close();
      await pool.close().catch(() => undefined);
      throw err;
    }
  }

  poolStats(): { total: number; idle: number; waiting: number } {
    return this.#pool.poolStats();
  }

  get caching(): boolean {
    return this.#feed?.live ?? false;
  }

  /**
   * A count that moves on every write this replica hears of (its own, and other processes' through
   * LISTEN/NOTIFY: an `ingest`, another replica); undefined without the change feed. No round-trip.
   */
  writeStamp(): number | undefined {
    return this.#feed?.stamp();
  }

  warm(): Promise<void> {
    return this.#pool.warm();
  }

  /** Newest first (contract.md §4.3); `orgId` null = every org. @throws IbexError for a non-UUID id. */
  async hot(orgId: string | null, agentId: string, opts: PgReadOptions): Promise<StoreHit[]> {
    const agent = uuidArg('agent_id', agentId);
    const org = orgId === null ? null : uuidArg('org_id', orgId);
    const minConfidence = opts.minConfidence ?? 0;
    const maxChars = opts.maxChars ?? NO_CAP;
    const limit = opts.limit ?? HOT_LIMIT;
    const cache = this.caching ? this.#hotCache : undefined;
    const key = `${org ?? '*'} ${agent} ${minConfidence} ${maxChars} ${limit}`;
    const cached = cache?.peek(key);
    if (cached !== undefined) return [...cached];
    const generation = cache?.generation ?? 0;
    const hits = await this.#reads.hot(agent, org, { minConfidence, maxChars, limit }, opts);
    cache?.put(key, hits, generation);
    return [...hits];
  }

  /** Best BM25 score first (pg-reads.ts); `[]` without a query when the text has no searchable term. */
  async search(
    orgId: string | null,
    agentId: string,
    query: string,
    opts: PgReadOptions,
  ): Promise<StoreHit[]> {
    const org = orgId === null ? null : uuidArg('org_id', orgId);
    const agent = uuidArg('agent_id', agentId);
    const terms = toWebSearchQuery(query);
    if (terms === null) return [];
    return this.#reads.search(terms, agent, org, opts, neighbourArg(opts.neighbours));
  }

  /**
   * {@link PgStore.search} for the retrieval branch: the same rows as retrieval hits (contents as UTF-8
   * bytes), checked against the request's org and agent (a row of another is counted `foreign` and
   * dropped), read as one aggregated row instead of one DataRow per hit (`PgReads.searchHits`).
   */
  async searchHits(
    orgId: string,
    agentId: string,
    query: string,
    opts: PgReadOptions,
  ): Promise<ValidatedHits> {
    const org = uuidArg('org_id', orgId);
    const agent = uuidArg('agent_id', agentId);
    const terms = toWebSearchQuery(query);
    if (terms === null) return { hits: [], invalid: 0, foreign: 0, oversize: 0, ignored: 0 };
    const { hits, foreign } = await this.#reads.searchHits(
      terms,
      agent,
      org,
      opts,
      neighbourArg(opts.neighbours),
    );
    return { hits, invalid: 0, foreign, oversize: 0, ignored: 0 };
  }

  /** The stored contract.md §4.2 envelope, or `null`. Throws as `hot`. */
  async getDirective(
    orgId: string,
    agentId: string,
    opts: Pick<PgReadOptions, 'timeoutMs' | 'signal'>,
  ): Promise<DirectiveEnvelope | null> {
    const org = uuidArg('org_id', orgId);
    const agent = uuidArg('agent_id', agentId);
    const cache = this.caching ? this.#directiveCache : undefined;
    const key = `${org} ${agent}`;
    const cached = cache?.peek(key);
    if (cached !== undefined) return cached;
    const generation = cache?.generation ?? 0;
    const envelope = await this.#reads.directive(org, agent, opts);
    cache?.put(key, envelope, generation);
    return envelope;
  }

  async replaceAgent(
    orgId: string,
    agentId: string,
    rows: readonly MemoryRow[],
    directive?: DirectiveRow,
  ): Promise<number> {
    const { org, agent, clean } = checkAgentRows(orgId, agentId, rows);
    await this.#transaction((client) => replaceAgentRows(client, org, agent, clean, directive));
    return clean.length;
  }

  async upsertMemories(rows: readonly MemoryRow[]): Promise<number> {
    const clean = rows.map(checkMemory);
    await this.#transaction((client) => insertMemories(client, clean));
    return clean.length;
  }

  async setDirective(directive: DirectiveRow): Promise<void> {
    await this.#transaction((client) => upsertDirective(client, directive));
  }

  /** contract.md §7a; rows locked in id order so concurrent feedback applies every step, no deadlock. */
  async recordFeedback(
    orgId: string,
    memoryIds: readonly string[],
    kind: FeedbackKind,
  ): Promise<UsefulnessUpdate[]> {
    const org = uuidArg('org_id', orgId);
    let rows: { id: string; previous: number; current: number }[] = [];
    await this.#transaction(async (client) => {
      rows = await applyFeedback(client, org, memoryIds, kind);
    });
    return feedbackUpdates(
      memoryIds,
      new Map(rows.map((r) => [r.id, r.previous])),
      new Map(rows.map((r) => [r.id, r.current])),
    );
  }

  /** Adds inclusion counts without NOTIFY, so caches are not emptied per flush (docs/postgres.md). */
  async addInclusions(rows: readonly InclusionCount[]): Promise<number> {
    if (!inclusionBatch(rows)) return 0;
    let changed = 0;
    await this.#transaction(async (client) => {
      changed = await addInclusionCounts(client, rows);
    }, false);
    return changed;
  }

  async counts(): Promise<{ memories: number; directives: number; agents: number }> {
    const [row] = await this.#pool.query<{ m: string; a: string; d: string }>(
      `SELECT (SELECT count(*) FROM ${this.schema}.memories) AS m,
              (SELECT count(*) FROM (SELECT DISTINCT org_id, agent_id FROM ${this.schema}.memories) s) AS a,
              (SELECT count(*) FROM ${this.schema}.directives) AS d`,
    );
    return { memories: Number(row!.m), agents: Number(row!.a), directives: Number(row!.d) };
  }

  /** As EmbeddedStore.warmTenants: agents among 20,000 rows, queries from their newest memories. */
  async warmTenants(agents: number, queries: number): Promise<WarmTenant[]> {
    const scopes = await this.#pool.query<{ org_id: string; agent_id: string }>(
      `SELECT org_id::text, agent_id::text FROM (SELECT org_id, agent_id FROM ${this.schema}.memories LIMIT 20000) s
       GROUP BY org_id, agent_id LIMIT $1`,
      [agents],
    );
    const out: WarmTenant[] = [];
    for (const s of scopes) {
      const rows = await this.#pool.query<{ content: string }>(
        `SELECT content FROM ${this.schema}.memories WHERE org_id = $1 AND agent_id = $2
         ORDER BY created_at DESC LIMIT $3`,
        [s.org_id, s.agent_id, queries],
      );
      out.push({
        orgId: s.org_id,
        agentId: s.agent_id,
        queries: queriesFromContents(rows.map((r) => r.content)),
      });
    }
    return out;
  }

  async analyze(): Promise<void> {
    await this.#pool.query(`ANALYZE ${this.schema}.memories, ${this.schema}.directives`);
  }

  /**
   * VACUUM (ANALYZE) after a bulk import, ANALYZE alone where VACUUM is not allowed (not the tables'
   * owner): an import replaces each agent's rows, and their dead versions would otherwise stay in every
   * search until autovacuum runs (late, or never where it is off), and the statistics with them. The
   * search's term statistics too: their triggers rewrite a row per term and write, so one LoCoMo import
   * leaves ~30,000 dead versions there, which every search's idf lookups then step over.
   */
  async finishImport(): Promise<void> {
    const s = this.schema;
    try {
      await this.#pool.query(
        `VACUUM (ANALYZE) ${s}.memories, ${s}.directives, ${s}.search_terms, ${s}.search_stats`,
      );
    } catch {
      await this.analyze();
    }
  }

  async #transaction(work: PgWork, announce = true): Promise<void> {
    try {
      await this.#pool.transaction(this.schema, work, announce);
    } finally {
      if (announce) this.#feed?.noteWrite();
      else PG_EVENTS.unannounced_writes++;
    }
  }

  async close(): Promise<void> {
    await this.#feed?.close();
    await this.#pool.close();
  }
}
