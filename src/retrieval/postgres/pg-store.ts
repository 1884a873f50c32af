/**
 * PostgreSQL store (contract.md §4.3): the embedded store's contract — hot memories, cold search,
 * directives, same hit shape, org/agent scoping and limits — on a database shared by a fleet of replicas.
 *
 * - Connections are long-lived: a bounded node-postgres pool that keeps `poolMin` of them open through
 *   quiet spells (re-opened in the background when the server closes one, never inside a read), so a
 *   read costs one round-trip and no backend start-up.
 * - A read's branch time is the store's own timer: when it fires (or the branch aborts) the read answers
 *   at once, and its statement is left to end on the server under a fixed `statement_timeout` set once per
 *   connection at start-up; then the connection goes back to the pool. No cancel request (each one is a new
 *   connection to the server) and no dropped connection per timeout: under overload those made every next
 *   read slower still. A cancel is sent only as a backstop, for a statement still running well past that
 *   bound (a server where it is not in effect), and that connection is then closed.
 * - A read that fails on a connection-level error (a backend terminated, a server-closed idle
 *   connection) runs once more on another connection: reads are plain SELECTs, safe to repeat.
 * - Hot reads and directives are cached per agent until a content write: this process's own at once, other
 *   replicas' through LISTEN/NOTIFY (pg-change-feed.ts), and for at most PG_CACHE_MAX_AGE_MS (inclusion
 *   counts do not notify). Without a live LISTEN connection reads go through.
 * - Reads are named (prepared once per connection) unless through a transaction pooler.
 * - Statements name their schema, and writes scope theirs with `set_config(…, true)` inside their
 *   transaction: nothing depends on session state, so the store works through a transaction-pooling
 *   PgBouncer (`transactionPooler`; docs/postgres.md).
 * - Cold search: `websearch_to_tsquery('simple', …)` over a `tsvector` (GIN) of words and CJK bigrams
 *   (search-text.ts), ranked by `ts_rank(…, 1|32)`: term frequency over 1 + log(length), then
 *   rank/(rank+1), which is already in [0,1). Not `ts_rank_cd`: cover density
 *   over an OR of terms rewards long memories that hold many of the words anywhere, and on the LoCoMo QA
 *   (1,977 questions with evidence turns) its recall@10 of the evidence was 0.055 (0.138 with length
 *   normalisation) against 0.470 for `ts_rank(…, 1|32)` and 0.567 for the embedded store's BM25
 *   (docs/scaling.md, "Which store when").
 * - Memories longer than the size cap are filtered in SQL on the stored code-point length.
 */
import type pg from 'pg';
import type { FeedbackKind, FeedbackStore, InclusionCount, UsefulnessUpdate } from '../feedback.js';
import { feedbackUpdates, inclusionBatch } from '../feedback.js';
import { neighbourArg } from '../neighbours.js';
import type { AgentWriter } from '../ports.js';
import { ReadCache } from '../read-cache.js';
import type { DirectiveEnvelope, DirectiveRow, MemoryRow, StoreHit } from '../store-rows.js';
import { checkAgentRows, checkMemory, uuidArg } from '../store-rows.js';
import { HOT_LIMIT } from '../validate.js';
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

/** Options of {@link PgStore.open}. */
export interface PgStoreOptions {
  /** `postgres://…` connection URL; never logged (it may hold a password). */
  url: string;
  /** Schema holding the tables; created at open. Default `ibex_context`. */
  schema?: string;
  /** Most connections this process opens. Default 8. */
  poolMax?: number;
  /**
   * Connections kept open while idle, opened before `open` resolves and re-opened in the background when
   * one is closed. Default 0; at most `poolMax`.
   */
  poolMin?: number;
  /** Connections above `poolMin` idle this long are closed, ms. Default 30,000. */
  idleTimeoutMs?: number;
  /**
   * Server-side bound of every read statement, ms: the connection's `statement_timeout`, sent once in its
   * start-up packet. An abandoned read holds its connection at most this long. Default 1000. With
   * `transactionPooler` it cannot be sent: set it on the server (ALTER ROLE … SET statement_timeout) to
   * this value, which the store then only uses for its cancel backstop.
   */
  statementTimeoutMs?: number;
  /**
   * Connections go through a transaction-pooling PgBouncer: no start-up options (PgBouncer refuses
   * them), and no LISTEN on `url` (a session feature). Default false.
   */
  transactionPooler?: boolean;
  /**
   * Where the change feed LISTENs (a direct connection, not through a transaction pooler); `''` = no read
   * cache. Default: `url`, or `''` with `transactionPooler`.
   */
  listenUrl?: string;
  /** How long a read waits for a free connection or a new one, ms. Default 1000. */
  connectTimeoutMs?: number;
  /** `application_name` of the connections (pg_stat_activity). Default `ibex-context`. */
  applicationName?: string;
  /** Called for errors of idle connections (e.g. a terminated backend); default: ignored. */
  onIdleError?: (err: Error) => void;
}

/**
 * Longest a cached hot read or directive is served, ms: the bound on how stale a hit's inclusion count
 * (`retrieval_count`, the composite's frequency input) may be, since inclusion flushes do not empty the
 * caches. Content writes still empty them at their commit.
 */
export const PG_CACHE_MAX_AGE_MS = 10_000;

/** PostgreSQL-backed memory and directive store. Not usable after {@link close}. */
export class PgStore implements FeedbackStore, AgentWriter {
  /** Schema in use. */
  readonly schema: string;
  /** What opening migrated. */
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

  /**
   * Connects, creates the schema and applies pending migrations (under an advisory lock), opens
   * `poolMin` connections and starts the change feed.
   * @throws Error for a bad schema name; the connection or migration error (pool closed).
   */
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
      // Set once per connection, never per read: no round-trip, and no session SET a pooler could lose.
      ...(pooler ? {} : { options: `-c statement_timeout=${statementTimeoutMs}` }),
      keepAlive: true,
    };
    // A transaction pooler may run a read on a server connection that never saw its PREPARE
    // (PgBouncer before 1.21, or without max_prepared_statements).
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

  /** Pool counters, for /readyz and tests. */
  poolStats(): { total: number; idle: number; waiting: number } {
    return this.#pool.poolStats();
  }

  /** Whether hot reads and directives are being served from the cache now (a live change feed). */
  get caching(): boolean {
    return this.#feed?.live ?? false;
  }

  /**
   * Opens connections until `poolMin` are open; resolves when they are (or failed to open: the periodic
   * check tries again). Runs by itself in the background; exposed for start-up and tests.
   */
  warm(): Promise<void> {
    return this.#pool.warm();
  }

  /**
   * The agent's most recent memories, then highest confidence, then id (contract.md §4.3).
   * @param orgId org to scope to; `null` = every org (the memory wire, which has no org).
   * @returns wire-shaped hits, `rank` 1..n, `similarity = confidence`, `source = "hot"`.
   * @throws IbexError INVALID_ARGUMENT for a non-UUID id; read errors as {@link PgPool.read}.
   */
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

  /**
   * Full-text search over the agent's memories, best `ts_rank` first (contract.md §4.3). Any text is
   * accepted: it is reduced to plain terms by `toWebSearchQuery`, so it is never syntax.
   * @returns wire-shaped hits, `rank` 1..n, `similarity = ts_rank(…, 1|32)` in [0,1), `source = "fts"`;
   *   `[]` without a query to the database when the text has no searchable term.
   */
  async search(
    orgId: string | null,
    agentId: string,
    query: string,
    opts: PgReadOptions,
  ): Promise<StoreHit[]> {
    const agent = uuidArg('agent_id', agentId);
    const org = orgId === null ? null : uuidArg('org_id', orgId);
    const terms = toWebSearchQuery(query);
    if (terms === null) return [];
    return this.#reads.search(terms, agent, org, opts, neighbourArg(opts.neighbours));
  }

  /** The stored directive as a contract.md §4.2 envelope, or `null` when none is stored. Throws as `hot`. */
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

  /**
   * Replaces one org+agent's memories (and directive when given) in one transaction: re-running an
   * import is idempotent and readers never see a half-written agent.
   * @throws IbexError INVALID_ARGUMENT for a bad id/confidence/created_at or a row of another org/agent.
   */
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

  /** Inserts or replaces memories by id, in one transaction. Throws as {@link replaceAgent}. */
  async upsertMemories(rows: readonly MemoryRow[]): Promise<number> {
    const clean = rows.map(checkMemory);
    await this.#transaction((client) => insertMemories(client, clean));
    return clean.length;
  }

  /** Stores (or replaces) one directive; values as given, contract.md §4.2 applies on read. */
  async setDirective(directive: DirectiveRow): Promise<void> {
    await this.#transaction((client) => upsertDirective(client, directive));
  }

  /**
   * RecordMemoryFeedback on this store (contract.md §7a): one statement in one transaction, scoped by
   * `org_id` in SQL. The rows are locked before their old value is read, so concurrent feedback on one
   * memory (from any replica) applies every step; they are locked in id order, so two calls naming the
   * same memories in different orders wait for each other rather than deadlock.
   * @param orgId canonical lower-case UUID.
   * @param memoryIds canonical lower-case UUIDs, distinct.
   * @returns the org's memories among `memoryIds`, in that order, with their usefulness before and after.
   */
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

  /**
   * Adds inclusion counts in one statement (at most {@link INCLUSION_BATCH} rows). Unlike every other
   * write it does not empty the read caches (no NOTIFY): the counter flushes about once a second, and
   * announcing each flush emptied every replica's caches as often. A cached hot read's `retrieval_count`
   * is therefore up to {@link PG_CACHE_MAX_AGE_MS} old, or until the next content write (docs/postgres.md).
   * @returns rows updated.
   */
  async addInclusions(rows: readonly InclusionCount[]): Promise<number> {
    if (!inclusionBatch(rows)) return 0;
    let changed = 0;
    await this.#transaction(async (client) => {
      changed = await addInclusionCounts(client, rows);
    }, false);
    return changed;
  }

  /** Row counts, for ingest summaries and tests. */
  async counts(): Promise<{ memories: number; directives: number; agents: number }> {
    const [row] = await this.#pool.query<{ m: string; a: string; d: string }>(
      `SELECT (SELECT count(*) FROM ${this.schema}.memories) AS m,
              (SELECT count(*) FROM (SELECT DISTINCT org_id, agent_id FROM ${this.schema}.memories) s) AS a,
              (SELECT count(*) FROM ${this.schema}.directives) AS d`,
    );
    return { memories: Number(row!.m), agents: Number(row!.a), directives: Number(row!.d) };
  }

  /**
   * Refreshes the planner's statistics of the tables (after a bulk import: the cold search's plan
   * depends on them).
   */
  async analyze(): Promise<void> {
    await this.#pool.query(`ANALYZE ${this.schema}.memories, ${this.schema}.directives`);
  }

  /**
   * After a bulk import: the cold search's plan needs the statistics of the tables just filled, and
   * autovacuum would get there late.
   */
  async finishImport(): Promise<void> {
    await this.analyze();
  }

  /**
   * One write transaction. A content write (`announce`, the default) empties this process's read caches
   * at once and every replica's at its commit; an inclusion count changes neither.
   */
  async #transaction(work: PgWork, announce = true): Promise<void> {
    try {
      await this.#pool.transaction(this.schema, work, announce);
    } finally {
      if (announce) this.#feed?.noteWrite();
      else PG_EVENTS.unannounced_writes++;
    }
  }

  /** Closes every connection; idempotent. */
  async close(): Promise<void> {
    await this.#feed?.close();
    await this.#pool.close();
  }
}
