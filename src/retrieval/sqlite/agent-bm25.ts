/**
 * The embedded store's cold-search ranking: BM25 over the searched agent's own rows (docs/scoring.md,
 * "BM25 over the agent's rows"), as the PostgreSQL store ranks. FTS5's bm25() takes its statistics over the
 * whole table, every tenant: a speaker's name, in half of one agent's rows, is rare there and outweighed
 * the words a question is about.
 */
import type Database from 'better-sqlite3';
import { compareCodePoints } from '../../text/code-point-order.js';
import { WriteWatch } from '../read-cache.js';
import { BM25_B, BM25_K1 } from '../store-rows.js';

/** Rows kept in a connection's per-agent rows, all agents together (~150 bytes a row without text). */
export const AGENT_ROWS_CACHE_ROWS = 200_000;
/** Memory text kept with them, all agents together, in characters (UTF-16 code units). */
export const AGENT_ROWS_CACHE_CHARS = 16 * 1024 * 1024;
/** Positions of term postings kept per row of an agent (a term costs its matches + 1). */
export const POSTINGS_PER_ROW = 8;
/** An agent with more text than this keeps its statistics and columns only; its hits' text is read by key. */
export const AGENT_TEXT_MAX_CHARS = AGENT_ROWS_CACHE_CHARS / 8;

/**
 * One agent's rows as the search reads them, in row-key order: the ranking's statistics and every column a
 * hit carries, so that a search reads no row from SQLite (reading ~500 rows by key cost more than ranking).
 */
export interface AgentRows {
  /** Row key → position in the arrays below. */
  index: Map<number, number>;
  pks: Float64Array;
  ids: string[];
  orgIds: string[];
  agentIds: string[];
  categories: string[];
  confidence: Float64Array;
  /** Code points, as stored (the content cap compares them). */
  chars: Float64Array;
  /** Epoch ms. */
  createdAt: Float64Array;
  usefulness: Float64Array;
  inclusions: Float64Array;
  /** The contents; `null` for an agent over {@link AGENT_TEXT_MAX_CHARS}. */
  contents: string[] | null;
  /** UTF-16 code units of `contents` (0 without them). */
  textUnits: number;
  /** BM25's per-row factor (k1 + 1) / (1 + k1 (1 − b + b · chars / mean chars)). */
  norm: Float64Array;
  /** Query term (FTS5 expression) → positions of the rows it matches, read once per term. */
  postings: Map<string, Int32Array>;
  /** Positions the postings may still take: {@link POSTINGS_PER_ROW} per row, plus one per term. */
  postingRoom: number;
}

/** A ranked row: its key, its position in the agent's rows and its BM25 score x (> 0). */
export interface RankedRow {
  pk: number;
  i: number;
  x: number;
}

/** A ranking and the agent's rows it indexes (as read at the same data version). */
export interface Ranking {
  agent: AgentRows;
  ranked: RankedRow[];
}

type AgentColumns = [
  pk: number,
  id: string,
  chars: number,
  confidence: number,
  orgId: string,
  agentId: string,
  category: string,
  createdAt: number,
  usefulness: number,
  inclusions: number,
];

export interface AgentScope {
  /** Null: the agent in every org (the memory wire's read). */
  org: string | null;
  agent: string;
  minConfidence: number;
}

/**
 * Per-connection BM25 ranking. An agent's rows (statistics, columns and text) are read once and kept until
 * any commit to the database (`PRAGMA data_version`, checked on every search, and this thread's own
 * writes), at most {@link AGENT_ROWS_CACHE_ROWS} rows and {@link AGENT_ROWS_CACHE_CHARS} of text in all.
 */
export class AgentBm25 {
  readonly #rows: Database.Statement<{ org: string | null; agent: string }, AgentColumns>;
  readonly #texts: Database.Statement<{ org: string | null; agent: string }, string>;
  readonly #read: (at: AgentScope) => { columns: AgentColumns[]; texts: string[] | null };
  readonly #termRows: Database.Statement<[string], number>;
  readonly #watch: WriteWatch;
  readonly #cache = new Map<string, AgentRows>();
  #cachedRows = 0;
  #cachedUnits = 0;
  #stamp = -1;

  constructor(db: Database.Database) {
    const scope = 'WHERE agent_id = @agent AND (@org IS NULL OR org_id = @org) ORDER BY pk';
    this.#rows = db
      .prepare<{ org: string | null; agent: string }, AgentColumns>(
        `SELECT pk, id, chars, confidence, org_id, agent_id, category, created_at, usefulness, inclusions
         FROM memories ${scope}`,
      )
      .raw(true);
    this.#texts = db
      .prepare<{ org: string | null; agent: string }, string>(`SELECT content FROM memories ${scope}`)
      .pluck();
    // One read transaction: the texts belong to the same rows as the columns.
    this.#read = db.transaction((at: AgentScope) => {
      const params = { org: at.org, agent: at.agent };
      const columns = this.#rows.all(params);
      let chars = 0;
      for (const r of columns) chars += r[2];
      return { columns, texts: chars <= AGENT_TEXT_MAX_CHARS ? this.#texts.all(params) : null };
    });
    this.#termRows = db
      .prepare<[string], number>('SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?')
      .pluck();
    this.#watch = new WriteWatch(db, undefined, 0);
  }

  /**
   * The agent's rows matching any of `terms` (FTS5 MATCH expressions, {@link toFtsTerms}) under `scope` (its
   * FTS5 scope expression), best first: x = Σ over the terms a row holds of idf · norm, idf = ln(1 + (N − n +
   * 0.5)/(n + 0.5)) over the agent's N rows, n of which hold the term. A term counts once per row. Ties go
   * to the lower memory id; rows under `minConfidence` are left out; at most `limit` rows.
   */
  rank(scope: string, at: AgentScope, terms: readonly string[], limit: number): Ranking {
    let rows = this.#agentRows(at, false);
    let positions = this.#positions(rows, scope, terms, true);
    // A row written after the agent's rows were read, within the same data version: read them again once.
    if (positions === null) {
      rows = this.#agentRows(at, true);
      positions = this.#positions(rows, scope, terms, false)!;
    }
    const n = rows.ids.length;
    const x = new Float64Array(n);
    const touched: number[] = [];
    for (const held of positions) {
      const df = held.length;
      if (df === 0) continue;
      const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      for (const i of held) {
        const before = x[i]!;
        if (before === 0) touched.push(i);
        x[i] = before + idf * rows.norm[i]!;
      }
    }
    const kept =
      at.minConfidence > 0 ? touched.filter((i) => rows.confidence[i]! >= at.minConfidence) : touched;
    kept.sort((a, b) => x[b]! - x[a]! || compareCodePoints(rows.ids[a]!, rows.ids[b]!));
    return { agent: rows, ranked: kept.slice(0, limit).map((i) => ({ pk: rows.pks[i]!, i, x: x[i]! })) };
  }

  /**
   * Each term's matching rows as positions in `rows`, from the agent's postings or one MATCH (kept while
   * there is room). `strict`: null when a MATCH finds a row `rows` does not hold.
   */
  #positions(rows: AgentRows, scope: string, terms: readonly string[], strict: boolean): Int32Array[] | null {
    const out: Int32Array[] = [];
    for (const t of terms) {
      let held = rows.postings.get(t);
      if (held === undefined) {
        const pks = this.#termRows.all(`scope:${scope} AND content:${t}`);
        held = knownPositions(rows, pks);
        if (held.length < pks.length && strict) return null;
        if (rows.postingRoom >= held.length) {
          rows.postings.set(t, held);
          rows.postingRoom -= held.length + 1;
        }
      }
      out.push(held);
    }
    return out;
  }

  #agentRows(at: AgentScope, reload: boolean): AgentRows {
    const stamp = this.#watch.stamp();
    if (stamp !== this.#stamp) {
      this.#cache.clear();
      this.#cachedRows = 0;
      this.#cachedUnits = 0;
      this.#stamp = stamp;
    }
    const key = `${at.org}|${at.agent}`;
    const cached = reload ? undefined : this.#cache.get(key);
    if (cached !== undefined) {
      // Most recently used last: eviction takes the first.
      this.#cache.delete(key);
      this.#cache.set(key, cached);
      return cached;
    }
    const old = this.#cache.get(key);
    if (old !== undefined) {
      this.#cache.delete(key);
      this.#cachedRows -= old.ids.length;
      this.#cachedUnits -= old.textUnits;
    }
    const rows = agentRows(this.#read(at));
    const n = rows.ids.length;
    while (
      this.#cache.size > 0 &&
      (this.#cachedRows + n > AGENT_ROWS_CACHE_ROWS ||
        this.#cachedUnits + rows.textUnits > AGENT_ROWS_CACHE_CHARS)
    ) {
      const [oldest, evicted] = this.#cache.entries().next().value as [string, AgentRows];
      this.#cache.delete(oldest);
      this.#cachedRows -= evicted.ids.length;
      this.#cachedUnits -= evicted.textUnits;
    }
    this.#cache.set(key, rows);
    this.#cachedRows += n;
    this.#cachedUnits += rows.textUnits;
    return rows;
  }
}

function agentRows({ columns, texts }: { columns: AgentColumns[]; texts: string[] | null }): AgentRows {
  const n = columns.length;
  let chars = 0;
  for (const r of columns) chars += r[2];
  const mean = Math.max(1, chars / Math.max(1, n));
  const rows: AgentRows = {
    index: new Map(),
    pks: new Float64Array(n),
    ids: new Array<string>(n),
    orgIds: new Array<string>(n),
    agentIds: new Array<string>(n),
    categories: new Array<string>(n),
    confidence: new Float64Array(n),
    chars: new Float64Array(n),
    createdAt: new Float64Array(n),
    usefulness: new Float64Array(n),
    inclusions: new Float64Array(n),
    contents: texts,
    textUnits: 0,
    norm: new Float64Array(n),
    postings: new Map(),
    postingRoom: POSTINGS_PER_ROW * n + 1024,
  };
  for (let i = 0; i < n; i++) {
    const [pk, id, c, confidence, orgId, agentId, category, createdAt, usefulness, inclusions] = columns[i]!;
    rows.index.set(pk, i);
    rows.pks[i] = pk;
    rows.ids[i] = id;
    rows.orgIds[i] = orgId;
    rows.agentIds[i] = agentId;
    rows.categories[i] = category;
    rows.confidence[i] = confidence;
    rows.chars[i] = c;
    rows.createdAt[i] = createdAt;
    rows.usefulness[i] = usefulness;
    rows.inclusions[i] = inclusions;
    rows.norm[i] = (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + (BM25_B * c) / mean));
  }
  if (texts !== null) for (const t of texts) rows.textUnits += t.length;
  return rows;
}

/** Positions in `rows` of the rows of `pks` it holds (a row written after it was read is not there). */
function knownPositions(rows: AgentRows, pks: readonly number[]): Int32Array {
  const held = new Int32Array(pks.length);
  let k = 0;
  for (const pk of pks) {
    const i = rows.index.get(pk);
    if (i !== undefined) held[k++] = i;
  }
  return k === pks.length ? held : held.slice(0, k);
}
