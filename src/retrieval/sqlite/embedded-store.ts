/**
 * Embedded store (contract.md §4.3): SQLite with WAL and FTS5; the service reads it in store-read threads.
 * Similarity: hot = confidence, cold = x/(1+x) with x the BM25 score over the agent's rows (agent-bm25.ts),
 * carried in a row as −x, FTS5's sign (docs/design/retrieval.md).
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { MemoryContent } from '../../text/content-bytes.js';
import { toFtsTerms } from '../../text/fts-query.js';
import type { MemoryHit } from '../../wire/types.js';
import { mergeNeighbours, type NeighbourRow, neighbourArg, type ScoredRow } from '../neighbours.js';
import type { WarmTenant } from '../ports.js';
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
import { HOT_LIMIT, SEARCH_LIMIT, setScoringInputs, type ValidatedHits } from '../validate.js';
import { queriesFromContents } from '../warm-memories.js';
import { AgentBm25, type AgentRows, type RankedRow } from './agent-bm25.js';
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

// CASE reads the content column only on its THEN branch, so an oversize row's text is never read.
const MEMORY_COLUMNS =
  'm.id, m.org_id, m.agent_id, CASE WHEN m.chars <= @maxChars THEN m.content END AS content, m.category, ' +
  'm.confidence, m.created_at, m.usefulness, m.inclusions';

/** A row read in raw mode: {@link MEMORY_COLUMNS}' values in that order, then a search's bm25 score. */
type RawMemoryRow = [
  id: string,
  orgId: string,
  agentId: string,
  content: string | null,
  category: string,
  confidence: number,
  createdAt: number,
  usefulness: number,
  inclusions: number,
  score?: number,
];
interface HeldRow {
  id: string;
  content: string | null;
  raw: RawMemoryRow;
}
const CREATED_AT = 6;
const CATEGORY = 4;
const SCORE = 9;

/**
 * A raw row as the retrieval branch's hit, built directly: the fields `validateHit` reads from the wire
 * shape, without the wire shape's ISO date and three UUID checks per row (the store wrote them checked).
 */
function rawToHit(row: RawMemoryRow, similarity: number, rank: number, content: string): MemoryHit {
  const hit: MemoryHit = {
    memory_id: row[0],
    org_id: row[1],
    agent_id: row[2],
    content,
    category: row[4],
    confidence: row[5],
    similarity,
    rank,
    source: 'fts',
  };
  if (Number.isFinite(row[6])) hit.created_at_ms = row[6];
  setScoringInputs(hit, row[7], row[8]);
  return hit;
}

/** Ranked rows built from the agent's kept rows, as {@link MEMORY_COLUMNS} reads them; score = −x. */
function rankedFromAgent(
  agent: AgentRows,
  contents: readonly string[],
  ranked: readonly RankedRow[],
  maxChars: number,
): RawMemoryRow[] {
  return ranked.map(
    ({ i, x }): RawMemoryRow => [
      agent.ids[i]!,
      agent.orgIds[i]!,
      agent.agentIds[i]!,
      agent.chars[i]! <= maxChars ? contents[i]! : null,
      agent.categories[i]!,
      agent.confidence[i]!,
      agent.createdAt[i]!,
      agent.usefulness[i]!,
      agent.inclusions[i]!,
      -x,
    ],
  );
}

/** A raw row as the named row `toHit` shapes into a memory-wire hit. */
function rowObject(raw: RawMemoryRow): MemoryDbRow {
  return {
    id: raw[0],
    org_id: raw[1],
    agent_id: raw[2],
    content: raw[3],
    category: raw[4],
    confidence: raw[5],
    created_at: raw[6],
    usefulness: raw[7],
    inclusions: raw[8],
  };
}

/**
 * FTS5's own ranking (bm25() over the whole table), with its limit written as `limit`: what the store's
 * search ranked by before BM25 over the agent's rows ({@link AgentBm25}); benches compare the two.
 */
export function searchSql(limit: string): string {
  return `SELECT ${MEMORY_COLUMNS}, f.score AS score
       FROM (SELECT rowid, bm25(memories_fts, 1.0, 0.0) AS score FROM memories_fts
             WHERE memories_fts MATCH @match ORDER BY score LIMIT 2 * ${limit}) f
       CROSS JOIN memories m ON m.pk = f.rowid
       WHERE m.agent_id = @agent AND (@org IS NULL OR m.org_id = @org) AND m.confidence >= @minConfidence
       ORDER BY f.score, m.id LIMIT ${limit}`;
}

/** The memory just after (`>`) or before a time, of one category, in the search's scope. */
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

export class EmbeddedStore extends EmbeddedWriter {
  readonly path: string;
  readonly #maxChars: number;
  readonly #hotCache: ReadCache<readonly StoreHit[]> | undefined;
  /** Hot reads by a store-read thread (contents may be bytes), kept apart from {@link hot}'s. */
  readonly #threadHotCache: ReadCache<readonly StoreHit<MemoryContent>[]> | undefined;
  readonly #directiveCache: ReadCache<DirectiveEnvelope | null> | undefined;
  readonly #hot: LimitStatement<ReadParams, MemoryDbRow>;
  /** The search's ranking; its rows' columns then come by row key, in raw mode ({@link RawMemoryRow}). */
  readonly #bm25: AgentBm25;
  readonly #rowsByKey: Database.Statement<{ pks: string; maxChars: number }, RawMemoryRow>;
  readonly #next: Database.Statement<NeighbourParams, RawMemoryRow>;
  readonly #previous: Database.Statement<NeighbourParams, RawMemoryRow>;
  #rowStamp: Database.Statement<[], number> | undefined;
  readonly #getDirective: Database.Statement<
    [string, string],
    { content: string | null; injection_mode: string; version_id: string }
  >;

  private constructor(file: string, db: Database.Database, options: OpenOptions) {
    super(db);
    this.path = file;
    this.#maxChars = maxCharsArg(options.maxMemoryChars, DEFAULT_MAX_MEMORY_CHARS);
    if (options.cache !== false) {
      const watch = new WriteWatch(db);
      this.#hotCache = new ReadCache(watch);
      this.#threadHotCache = new ReadCache(watch);
      this.#directiveCache = new ReadCache(watch);
    }
    // `@org IS NULL` is the memory wire's agent-across-orgs read.
    this.#hot = new LimitStatement(
      db,
      (limit) => `SELECT ${MEMORY_COLUMNS} FROM memories m
       WHERE m.agent_id = @agent AND (@org IS NULL OR m.org_id = @org) AND m.confidence >= @minConfidence
       ORDER BY m.created_at DESC, m.confidence DESC, m.id LIMIT ${limit}`,
      HOT_LIMIT,
    );
    this.#bm25 = new AgentBm25(db);
    // The row key last, taken off again: the ranking's order is kept by key.
    this.#rowsByKey = db
      .prepare<{ pks: string; maxChars: number }, RawMemoryRow>(
        `SELECT ${MEMORY_COLUMNS}, m.pk FROM memories m WHERE m.pk IN (SELECT value FROM json_each(@pks))`,
      )
      .raw(true);
    this.#next = db.prepare<NeighbourParams, RawMemoryRow>(neighbourSql(true)).raw(true);
    this.#previous = db.prepare<NeighbourParams, RawMemoryRow>(neighbourSql(false)).raw(true);
    this.#getDirective = db.prepare(
      'SELECT content, injection_mode, version_id FROM directives WHERE org_id = ? AND agent_id = ?',
    );
  }

  /** Opens or creates `file` (or `:memory:`), migrating it; @throws SqliteError, Error for a newer schema. */
  static open(file: string, options: OpenOptions = {}): EmbeddedStore {
    if (file !== ':memory:') fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    const db = new Database(file, { timeout: options.busyTimeoutMs ?? 2000 });
    try {
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      prepareConnection(db);
      return new EmbeddedStore(file, db, options);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  /**
   * Up to `agents` agents among the newest 20,000 rows, newest first, each with queries made from up to
   * `queries` of its newest memories (`queryFromContent`). For the start-up warm-up only: reads on the
   * main thread, before traffic.
   */
  warmTenants(agents: number, queries: number): WarmTenant[] {
    const scopes = this.db
      .prepare<[number], { org_id: string; agent_id: string }>(
        `SELECT org_id, agent_id FROM (SELECT org_id, agent_id, pk FROM memories ORDER BY pk DESC LIMIT 20000)
         GROUP BY org_id, agent_id ORDER BY max(pk) DESC LIMIT ?`,
      )
      .all(agents);
    const contents = this.db.prepare<[string, string, number], { content: string }>(
      'SELECT content FROM memories WHERE org_id = ? AND agent_id = ? ORDER BY pk DESC LIMIT ?',
    );
    return scopes.map((s) => ({
      orgId: s.org_id,
      agentId: s.agent_id,
      queries: queriesFromContents(contents.all(s.org_id, s.agent_id, queries).map((r) => r.content)),
    }));
  }

  /**
   * The highest row key: it grows whenever a memory is written (an import replaces an agent's rows with new
   * keys) and not when inclusion counts change. One index probe, for a poll on the main thread.
   */
  rowStamp(): number {
    this.#rowStamp ??= this.db.prepare<[], number>('SELECT coalesce(max(pk), 0) FROM memories').pluck();
    return this.#rowStamp.get() as number;
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
   * Newest first (contract.md §4.3); `orgId` null = every org. Cached hits are frozen and shared.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a non-UUID id or a bad option.
   */
  hot(orgId: string | null, agentId: string, options: ReadOptions = {}): StoreHit[] {
    const p = this.#params(orgId, agentId, options, HOT_LIMIT);
    const read = () => this.#hot.all(p).map((row, i) => toHit(row, row.confidence, i + 1, 'hot'));
    if (this.#hotCache === undefined) return read();
    return this.#hotCache.get(this.#hotKey(p), () => freezeHits(read())).slice();
  }

  /** The cached default hot read, else `undefined` and the generation for {@link cacheHot}. No SQL. */
  cachedHot(
    orgId: string,
    agentId: string,
  ): { hits: readonly StoreHit<MemoryContent>[] | undefined; generation: number } {
    if (this.#threadHotCache === undefined) return { hits: undefined, generation: 0 };
    const hits = this.#threadHotCache.peek(this.#hotKey(this.#params(orgId, agentId, {}, HOT_LIMIT)));
    return { hits, generation: this.#threadHotCache.generation };
  }

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

  /** Best BM25 first; any text becomes quoted terms, `[]` without one. Throws as {@link hot}. */
  search(orgId: string | null, agentId: string, query: string, options: ReadOptions = {}): StoreHit[] {
    const { rows } = this.#searchRows(orgId, agentId, query, options);
    return rows.map(({ raw, similarity }, i) => toHit(rowObject(raw), similarity, i + 1, 'fts'));
  }

  /**
   * {@link search} for the retrieval branch: the same rows, in the same order and with the same ranks and
   * similarities, as retrieval hits checked against the request's org and agent (`foreign`) and the
   * content cap (`oversize`), as `validateHits` would leave them, without the wire shape's ISO date.
   * Throws as {@link hot}.
   */
  searchHits(orgId: string | null, agentId: string, query: string, options: ReadOptions = {}): ValidatedHits {
    const { p, rows } = this.#searchRows(orgId, agentId, query, options);
    const out: ValidatedHits = { hits: [], invalid: 0, foreign: 0, oversize: 0, ignored: 0 };
    for (let i = 0; i < rows.length; i++) {
      const { raw, similarity } = rows[i]!;
      const content = raw[3];
      if (content === null) out.oversize++;
      else if (raw[2] !== p.agent || (p.org !== null && raw[1] !== p.org)) out.foreign++;
      else out.hits.push(rawToHit(raw, similarity, i + 1, content));
    }
    return out;
  }

  /**
   * A search's rows in raw mode (no per-row object with named keys), best first, each with its similarity:
   * x/(1+x) of the BM25 score x, neighbours of the best `options.neighbours` hits merged in at a share of theirs.
   */
  #searchRows(
    orgId: string | null,
    agentId: string,
    query: string,
    options: ReadOptions,
  ): { p: ReadParams; rows: { raw: RawMemoryRow; similarity: number }[] } {
    const p = this.#params(orgId, agentId, options, SEARCH_LIMIT);
    const terms = toFtsTerms(query);
    if (terms === null) return { p, rows: [] };
    const { agent, ranked } = this.#bm25.rank(scopeToken(p.org, p.agent), p, terms, p.limit);
    const rows =
      agent.contents === null
        ? this.#rankedByKey(ranked, p.maxChars)
        : rankedFromAgent(agent, agent.contents, ranked, p.maxChars);
    const parents = Math.min(rows.length, neighbourArg(options.neighbours));
    if (parents === 0)
      return { p, rows: rows.map((raw) => ({ raw, similarity: bm25ToSimilarity(raw[SCORE]!) })) };
    // mergeNeighbours keys rows by id and reads content: a small holder per row.
    const held = (raw: RawMemoryRow): HeldRow => ({ id: raw[0], content: raw[3], raw });
    const hits: ScoredRow<HeldRow>[] = rows.map((row) => ({ row: held(row), x: Math.max(0, -row[SCORE]!) }));
    const neighbours: NeighbourRow<HeldRow>[] = [];
    for (let i = 0; i < parents; i++) {
      const row = rows[i]!;
      const q = {
        org: p.org,
        agent: p.agent,
        minConfidence: p.minConfidence,
        maxChars: p.maxChars,
        at: row[CREATED_AT],
        category: row[CATEGORY],
      };
      const next = this.#next.get(q);
      if (next !== undefined) neighbours.push({ row: held(next), parent: i, next: true });
      const previous = this.#previous.get(q);
      if (previous !== undefined) neighbours.push({ row: held(previous), parent: i, next: false });
    }
    return {
      p,
      rows: mergeNeighbours(hits, neighbours, p.limit).map(({ row, x }) => ({
        raw: row.raw,
        similarity: x / (1 + x),
      })),
    };
  }

  /** Ranked rows read by key, for an agent whose text the ranking does not keep; score = −x. */
  #rankedByKey(ranked: readonly RankedRow[], maxChars: number): RawMemoryRow[] {
    const byKey = new Map<number, RawMemoryRow>();
    if (ranked.length > 0) {
      for (const row of this.#rowsByKey.all({ pks: JSON.stringify(ranked.map((r) => r.pk)), maxChars })) {
        byKey.set((row as unknown[]).pop() as number, row);
      }
    }
    const rows: RawMemoryRow[] = [];
    for (const { pk, x } of ranked) {
      const row = byKey.get(pk);
      // Deleted since the ranking read it.
      if (row === undefined) continue;
      row[SCORE] = -x;
      rows.push(row);
    }
    return rows;
  }

  /** The stored envelope (frozen, cached until a write), or `null`. Throws as {@link hot}. */
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
