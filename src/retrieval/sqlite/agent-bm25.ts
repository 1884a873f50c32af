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

/** Rows kept in a connection's per-agent statistics, all agents together (~60 bytes a row). */
export const AGENT_ROWS_CACHE_ROWS = 200_000;

/** One agent's rows as the ranking reads them, in row-key order. */
interface AgentRows {
  /** Row key → position in the arrays below. */
  index: Map<number, number>;
  pks: Float64Array;
  ids: string[];
  confidence: Float64Array;
  /** BM25's per-row factor (k1 + 1) / (1 + k1 (1 − b + b · chars / mean chars)). */
  norm: Float64Array;
}

/** A ranked row: its key and its BM25 score x (> 0). */
export interface RankedRow {
  pk: number;
  x: number;
}

export interface AgentScope {
  /** Null: the agent in every org (the memory wire's read). */
  org: string | null;
  agent: string;
  minConfidence: number;
}

/**
 * Per-connection BM25 ranking. Statistics (row count, mean length, per-row factors) are read once per
 * agent and kept until any commit to the database (`PRAGMA data_version`, checked on every search, and
 * this thread's own writes), at most {@link AGENT_ROWS_CACHE_ROWS} rows in all.
 */
export class AgentBm25 {
  readonly #rows: Database.Statement<{ org: string | null; agent: string }, [number, string, number, number]>;
  readonly #termRows: Database.Statement<[string], number>;
  readonly #watch: WriteWatch;
  readonly #cache = new Map<string, AgentRows>();
  #cachedRows = 0;
  #stamp = -1;

  constructor(db: Database.Database) {
    this.#rows = db
      .prepare<{ org: string | null; agent: string }, [number, string, number, number]>(
        `SELECT pk, id, chars, confidence FROM memories
         WHERE agent_id = @agent AND (@org IS NULL OR org_id = @org) ORDER BY pk`,
      )
      .raw(true);
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
  rank(scope: string, at: AgentScope, terms: readonly string[], limit: number): RankedRow[] {
    const matches = terms.map((t) => this.#termRows.all(`scope:${scope} AND content:${t}`));
    let rows = this.#agentRows(at, false);
    let positions = matches.map((pks) => knownPositions(rows, pks));
    // A row written after the statistics were read, within the same data version: read them again once.
    if (positions.some((held, t) => held.length < matches[t]!.length)) {
      rows = this.#agentRows(at, true);
      positions = matches.map((pks) => knownPositions(rows, pks));
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
    return kept.slice(0, limit).map((i) => ({ pk: rows.pks[i]!, x: x[i]! }));
  }

  #agentRows(at: AgentScope, reload: boolean): AgentRows {
    const stamp = this.#watch.stamp();
    if (stamp !== this.#stamp) {
      this.#cache.clear();
      this.#cachedRows = 0;
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
    }
    const raw = this.#rows.all({ org: at.org, agent: at.agent });
    const n = raw.length;
    let chars = 0;
    for (const r of raw) chars += r[2];
    const mean = Math.max(1, chars / Math.max(1, n));
    const rows: AgentRows = {
      index: new Map(),
      pks: new Float64Array(n),
      ids: new Array<string>(n),
      confidence: new Float64Array(n),
      norm: new Float64Array(n),
    };
    for (let i = 0; i < n; i++) {
      const [pk, id, c, confidence] = raw[i]!;
      rows.index.set(pk, i);
      rows.pks[i] = pk;
      rows.ids[i] = id;
      rows.confidence[i] = confidence;
      rows.norm[i] = (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + (BM25_B * c) / mean));
    }
    while (this.#cache.size > 0 && this.#cachedRows + n > AGENT_ROWS_CACHE_ROWS) {
      const [oldest, evicted] = this.#cache.entries().next().value as [string, AgentRows];
      this.#cache.delete(oldest);
      this.#cachedRows -= evicted.ids.length;
    }
    this.#cache.set(key, rows);
    this.#cachedRows += n;
    return rows;
  }
}

/** Positions in `rows` of the rows of `pks` it holds (a row written after it was read is not there). */
function knownPositions(rows: AgentRows, pks: readonly number[]): number[] {
  const held: number[] = [];
  for (const pk of pks) {
    const i = rows.index.get(pk);
    if (i !== undefined) held.push(i);
  }
  return held;
}
