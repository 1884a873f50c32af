/**
 * Embedded store (contract.md §4.3): SQLite through better-sqlite3, WAL mode, FTS5 for text search. It serves
 * hot memories, cold search and directives when no memory service / Redis is configured, and backs the
 * dev memory server (`ibex-context memory-server`) and LoCoMo ingest.
 *
 * Calls are synchronous; the service makes every read (hot, search, directive) in store-read threads
 * (store-reader.ts), so SQLite never runs on the gRPC event loop. Writes (ingest, dev tools) stay in-process.
 * Statements are prepared once in the constructor; hot reads and directives are cached per connection
 * until a write ({@link ReadCache}); the write path is embedded-writes.ts, the schema and its migrations
 * store-schema.ts.
 *
 * Caps (contract.md §4.1): at most `limit` hits (hot 20, cold 10), and a memory longer than
 * `maxMemoryChars` code points comes back as `{oversize: true, memory: {content: null, …}}` — decided by
 * SQL on the length stored at write time, so its text is neither read from disk nor copied to the caller;
 * validation then drops and counts it.
 *
 * Similarity (documented contract of this store):
 * - hot: `similarity = confidence` (a hot read has no query to be similar to; this keeps the interim
 *   score `0.85·s + 0.15·c` equal to the confidence), `source = "hot"`.
 * - cold: x = −bm25 (FTS5's bm25 is ≤ 0, more negative = better), `similarity = x / (1 + x)`, a
 *   monotonic map of [0, ∞) onto [0, 1); `source = "fts"`.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { MemoryContent } from '../../text/content-bytes.js';
import { toFtsQuery } from '../../text/fts-query.js';
import { mergeNeighbours, type NeighbourRow, neighbourArg, type ScoredRow } from '../neighbours.js';
import { ReadCache, WriteWatch } from '../read-cache.js';
import {
  bm25ToSimilarity,
  DEFAULT_MAX_MEMORY_CHARS,
  type DirectiveEnvelope,
  freezeHits,
  limitArg,
  type MemoryDbRow,
  maxCharsArg,
  minConfidenceArg,
  type OpenOptions,
  type ReadOptions,
  type StoreHit,
  scopeToken,
  toHit,
  uuidArg,
} from '../store-rows.js';
import { HOT_LIMIT, SEARCH_LIMIT } from '../validate.js';
import { EmbeddedWriter } from './embedded-writes.js';
import { LimitStatement } from './limit-statement.js';
import { prepareConnection } from './store-schema.js';

export {
  bm25ToSimilarity,
  DEFAULT_MAX_MEMORY_CHARS,
  type DirectiveEnvelope,
  type DirectiveRow,
  type MemoryRow,
  type OpenOptions,
  type ReadOptions,
  type StoreHit,
} from '../store-rows.js';

// The content of an oversize row is never read: CASE evaluates the column only on its THEN branch.
const MEMORY_COLUMNS =
  'm.id, m.org_id, m.agent_id, CASE WHEN m.chars <= @maxChars THEN m.content END AS content, m.category, ' +
  'm.confidence, m.created_at, m.usefulness, m.inclusions';

/**
 * The store's search statement (contract.md §4.3) with its limit written as `limit` (limit-statement.ts: a
 * literal for the default, `"@limit"` otherwise); bench:store times the two forms of this same text.
 * Ranked inside FTS5 on the index alone: only the best 2×`limit` rowids are joined with their rows
 * (before: every match of the agent was joined, its content read, then sorted). The slack keeps the
 * old tie-break (equal scores by id) at the cut, e.g. repeated one-line turns. The scope token
 * already restricts to org+agent; the outer predicate is a second, independent guard. CROSS JOIN
 * fixes the order: left alone, the planner walks all the agent's rows by index and probes the top-k.
 */
export function searchSql(limit: string): string {
  return `SELECT ${MEMORY_COLUMNS}, f.score AS score
       FROM (SELECT rowid, bm25(memories_fts, 1.0, 0.0) AS score FROM memories_fts
             WHERE memories_fts MATCH @match ORDER BY score LIMIT 2 * ${limit}) f
       CROSS JOIN memories m ON m.pk = f.rowid
       WHERE m.agent_id = @agent AND (@org IS NULL OR m.org_id = @org) AND m.confidence >= @minConfidence
       ORDER BY f.score, m.id LIMIT ${limit}`;
}

/**
 * The memory just after (`>`) or just before (`<`) a time, of one category, in the search's scope and
 * filters (neighbours.ts): one seek in the agent's recency index, ordered as the index is (read backwards
 * for the next one), so no sort: 4.5 µs a read on LoCoMo against 9.3 µs with `id` alone as the tie-break.
 */
function neighbourSql(after: boolean): string {
  const order = after
    ? 'm.created_at ASC, m.confidence ASC, m.id DESC'
    : 'm.created_at DESC, m.confidence DESC, m.id ASC';
  return `SELECT ${MEMORY_COLUMNS} FROM memories m
       WHERE m.agent_id = @agent AND (@org IS NULL OR m.org_id = @org) AND m.confidence >= @minConfidence
         AND m.created_at ${after ? '>' : '<'} @at AND m.category = @category
       ORDER BY ${order} LIMIT 1`;
}

interface NeighbourParams {
  org: string | null;
  agent: string;
  minConfidence: number;
  maxChars: number;
  at: number;
  category: string;
}

interface ReadParams {
  org: string | null;
  agent: string;
  minConfidence: number;
  maxChars: number;
  limit: number;
}

/** SQLite-backed memory and directive store (contract.md §4.3). Not safe to use after {@link close}. */
export class EmbeddedStore extends EmbeddedWriter {
  /** The database file path (`:memory:` for an in-memory store). */
  readonly path: string;
  readonly #maxChars: number;
  readonly #hotCache: ReadCache<readonly StoreHit[]> | undefined;
  /**
   * Hot reads a store-read thread made ({@link cacheHot}): their contents may be UTF-8 bytes, so they
   * are kept apart from {@link hot}'s own, which are always text.
   */
  readonly #threadHotCache: ReadCache<readonly StoreHit<MemoryContent>[]> | undefined;
  readonly #directiveCache: ReadCache<DirectiveEnvelope | null> | undefined;
  readonly #hot: LimitStatement<ReadParams, MemoryDbRow>;
  readonly #search: LimitStatement<ReadParams & { match: string }, MemoryDbRow & { score: number }>;
  readonly #searchFiltered: LimitStatement<ReadParams & { match: string }, MemoryDbRow & { score: number }>;
  readonly #next: Database.Statement<NeighbourParams, MemoryDbRow>;
  readonly #previous: Database.Statement<NeighbourParams, MemoryDbRow>;
  readonly #getDirective: Database.Statement<
    [string, string],
    { content: string | null; injection_mode: string; version_id: string }
  >;

  private constructor(file: string, db: Database.Database, options: OpenOptions) {
    super(db);
    this.path = file;
    this.#maxChars = maxCharsArg(options.maxMemoryChars, DEFAULT_MAX_MEMORY_CHARS);
    if (options.cache !== false) {
      // One watch for both caches: at most one `PRAGMA data_version` per check interval per connection.
      const watch = new WriteWatch(db);
      this.#hotCache = new ReadCache(watch);
      this.#threadHotCache = new ReadCache(watch);
      this.#directiveCache = new ReadCache(watch);
    }
    // `@org IS NULL` is the memory wire's agent-across-orgs read; SQLite decides it once per statement
    // step, and both indexes lead with what is bound.
    // The default limits are literals in the SQL (limit-statement.ts: a bound LIMIT re-plans every run).
    this.#hot = new LimitStatement(
      db,
      (limit) => `SELECT ${MEMORY_COLUMNS} FROM memories m
       WHERE m.agent_id = @agent AND (@org IS NULL OR m.org_id = @org) AND m.confidence >= @minConfidence
       ORDER BY m.created_at DESC, m.confidence DESC, m.id LIMIT ${limit}`,
      HOT_LIMIT,
    );
    this.#search = new LimitStatement(db, searchSql, SEARCH_LIMIT);
    // With a confidence floor (memory wire only) the filter must run before the limit.
    this.#searchFiltered = new LimitStatement(
      db,
      (limit) => `SELECT ${MEMORY_COLUMNS}, bm25(memories_fts, 1.0, 0.0) AS score
       FROM memories_fts JOIN memories m ON m.pk = memories_fts.rowid
       WHERE memories_fts MATCH @match AND m.agent_id = @agent AND (@org IS NULL OR m.org_id = @org)
         AND m.confidence >= @minConfidence
       ORDER BY score, m.id LIMIT ${limit}`,
      SEARCH_LIMIT,
    );
    this.#next = db.prepare(neighbourSql(true));
    this.#previous = db.prepare(neighbourSql(false));
    this.#getDirective = db.prepare(
      'SELECT content, injection_mode, version_id FROM directives WHERE org_id = ? AND agent_id = ?',
    );
  }

  /**
   * Opens (creating if needed) the store at `file`, migrating an older schema (store-schema.ts); the
   * parent directory is created on first start.
   * @param file path of the SQLite file, or `:memory:`.
   * @throws SqliteError when the file cannot be opened or is not a database; Error for a newer schema.
   */
  static open(file: string, options: OpenOptions = {}): EmbeddedStore {
    if (file !== ':memory:') fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    const db = new Database(file, { timeout: options.busyTimeoutMs ?? 2000 });
    try {
      db.pragma('journal_mode = WAL');
      // NORMAL is durable across application crashes in WAL mode; only an OS crash can lose the tail.
      db.pragma('synchronous = NORMAL');
      prepareConnection(db);
      return new EmbeddedStore(file, db, options);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  #params(orgId: string | null, agentId: string, options: ReadOptions, limit: number): ReadParams {
    return {
      org: orgId === null ? null : uuidArg('org_id', orgId),
      agent: uuidArg('agent_id', agentId),
      minConfidence: minConfidenceArg(options.minConfidence),
      maxChars: maxCharsArg(options.maxChars, this.#maxChars),
      limit: limitArg(options.limit, limit),
    };
  }

  /**
   * The agent's most recent memories, then highest confidence, then id (contract.md §4.3), served from the
   * read cache until a write. A fresh array each call; with the cache on, its hits are frozen, shared by
   * every caller (without it, as in a store-read thread, they are the caller's own).
   * @param orgId the org to scope to; `null` = every org (only for the memory wire, which has no org).
   * @returns wire-shaped hits, `rank` 1..n (at most `limit`, default 20), `similarity = confidence`,
   *   `source = "hot"`; an oversize memory as `{oversize: true, memory.content: null}`.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a non-UUID id or a bad option.
   */
  hot(orgId: string | null, agentId: string, options: ReadOptions = {}): StoreHit[] {
    const p = this.#params(orgId, agentId, options, HOT_LIMIT);
    const read = () => this.#hot.all(p).map((row, i) => toHit(row, row.confidence, i + 1, 'hot'));
    // Only cached hits are shared, so only they are frozen (a store-read thread rewrites its own).
    if (this.#hotCache === undefined) return read();
    return this.#hotCache.get(this.#hotKey(p), () => freezeHits(read())).slice();
  }

  /**
   * The default hot read (limit 20, no confidence floor, the store's cap) of one org+agent when the read
   * cache holds it fresh, else `hits: undefined` with the cache generation to pass to {@link cacheHot}
   * once the caller has read it elsewhere (a store-read thread). No SQL beyond the cache's
   * write check (a counter, and `PRAGMA data_version` at most every 10 ms: read-cache.ts). The hits are
   * the cache's own frozen array, the same object until a write, so a caller validates it once (retrieve.ts).
   */
  cachedHot(
    orgId: string,
    agentId: string,
  ): { hits: readonly StoreHit<MemoryContent>[] | undefined; generation: number } {
    if (this.#threadHotCache === undefined) return { hits: undefined, generation: 0 };
    const hits = this.#threadHotCache.peek(this.#hotKey(this.#params(orgId, agentId, {}, HOT_LIMIT)));
    return { hits, generation: this.#threadHotCache.generation };
  }

  /** Caches `hits` (a default hot read done elsewhere) unless a write intervened since `generation`. */
  cacheHot(
    orgId: string,
    agentId: string,
    hits: readonly StoreHit<MemoryContent>[],
    generation: number,
  ): void {
    const key = this.#hotKey(this.#params(orgId, agentId, {}, HOT_LIMIT));
    this.#threadHotCache?.put(key, freezeHits(hits.slice()), generation);
  }

  #hotKey(p: ReadParams): string {
    return `${p.org}|${p.agent}|${p.limit}|${p.minConfidence}|${p.maxChars}`;
  }

  /**
   * FTS5 search over the agent's memories, best BM25 first (contract.md §4.3). Any text is accepted: it is
   * reduced to quoted terms by `toFtsQuery`, so it never raises an FTS5 syntax error.
   * @param orgId the org to scope to; `null` = every org (memory wire only).
   * @returns wire-shaped hits, `rank` 1..n (at most `limit`, default 10), `similarity = x/(1+x)` with
   *   x = −bm25, `source = "fts"`; `[]` when the query has no searchable term; oversize as {@link hot}.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a non-UUID id or a bad option.
   */
  search(orgId: string | null, agentId: string, query: string, options: ReadOptions = {}): StoreHit[] {
    const p = this.#params(orgId, agentId, options, SEARCH_LIMIT);
    const terms = toFtsQuery(query);
    if (terms === null) return [];
    const match = `scope:${scopeToken(p.org, p.agent)} AND content:(${terms})`;
    const statement = p.minConfidence > 0 ? this.#searchFiltered : this.#search;
    const rows = statement.all({ ...p, match });
    const parents = Math.min(rows.length, neighbourArg(options.neighbours));
    if (parents === 0) return rows.map((row, i) => toHit(row, bm25ToSimilarity(row.score), i + 1, 'fts'));
    const hits: ScoredRow<MemoryDbRow>[] = rows.map((row) => ({ row, x: Math.max(0, -row.score) }));
    const neighbours: NeighbourRow<MemoryDbRow>[] = [];
    for (let i = 0; i < parents; i++) {
      const { created_at: at, category } = rows[i]!;
      const q = {
        org: p.org,
        agent: p.agent,
        minConfidence: p.minConfidence,
        maxChars: p.maxChars,
        at,
        category,
      };
      const next = this.#next.get(q);
      if (next !== undefined) neighbours.push({ row: next, parent: i, next: true });
      const previous = this.#previous.get(q);
      if (previous !== undefined) neighbours.push({ row: previous, parent: i, next: false });
    }
    return mergeNeighbours(hits, neighbours, p.limit).map(({ row, x }, i) =>
      toHit(row, x / (1 + x), i + 1, 'fts'),
    );
  }

  /**
   * The stored directive as a contract.md §4.2 envelope (frozen, shared), or `null` when none is stored; served
   * from the read cache until a write.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` when org_id or agent_id is not a UUID.
   */
  getDirective(orgId: string, agentId: string): DirectiveEnvelope | null {
    const org = uuidArg('org_id', orgId);
    const agent = uuidArg('agent_id', agentId);
    const read = (): DirectiveEnvelope | null => {
      const row = this.#getDirective.get(org, agent);
      if (row === undefined) return null;
      return Object.freeze({
        v: 1,
        content: row.content,
        injection_mode: row.injection_mode,
        version_id: row.version_id,
      });
    };
    return this.#directiveCache === undefined ? read() : this.#directiveCache.get(`${org}|${agent}`, read);
  }
}
