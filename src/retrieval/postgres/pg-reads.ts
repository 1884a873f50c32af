/** The PostgreSQL store's read statements; ids arrive checked, caching is the store's. */
import type pg from 'pg';
import type { MemoryHit } from '../../wire/types.js';
import { mergeNeighbours, type NeighbourRow, type ScoredRow } from '../neighbours.js';
import type { DirectiveEnvelope, StoreHit } from '../store-rows.js';
import { BM25_B, BM25_K1, type MemoryDbRow as StoreDbRow, toHit } from '../store-rows.js';
import { SEARCH_LIMIT, setScoringInputs } from '../validate.js';
import type { PgPool } from './pg-pool.js';
import { searchConfig } from './search-text.js';

export interface PgReadOptions {
  /** The branch's remaining time, ms. */
  timeoutMs: number;
  /** Aborted when the branch gives up. */
  signal?: AbortSignal;
  limit?: number;
  minConfidence?: number;
  /** Longest content returned, code points. Default: no cap. */
  maxChars?: number;
  /** Search only: dialogue neighbours of this many best hits, in the same statement; default 0. */
  neighbours?: number;
}

/** `created_at`: a Date from hot reads, whole epoch ms from searches ({@link searchColumns}). */
type MemoryDbRow = Omit<StoreDbRow, 'content' | 'created_at'> & {
  content: string;
  created_at: Date | number;
};

const COLUMN_NAMES = [
  'id',
  'org_id',
  'agent_id',
  'content',
  'category',
  'confidence',
  'created_at',
  'usefulness',
  'inclusions',
] as const;
const COLUMNS = COLUMN_NAMES.join(', ');

/**
 * A search's output columns (of table alias `prefix`): `created_at` as whole epoch ms, which node-postgres
 * reads as a number, instead of a timestamptz it turns into a Date per row (up to 600 a call).
 */
function searchColumns(prefix = ''): string {
  return COLUMN_NAMES.map((c) =>
    c === 'created_at'
      ? `floor(extract(epoch FROM ${prefix}created_at) * 1000)::float8 AS created_at`
      : `${prefix}${c}`,
  ).join(', ');
}
export const NO_CAP = 2_147_483_647;

/** A read's scope over the columns of table alias `p` (e.g. `m.`): $2 agent, $3 org, $4, $5. */
function scope(p = ''): string {
  return `${p}agent_id = $2 AND ($3::uuid IS NULL OR ${p}org_id = $3) AND ${p}confidence >= $4 AND ${p}content_chars <= $5`;
}
const SCOPE = scope();
const SCOPE_M = scope('m.');

/** Query lexemes a row is scored on, heaviest first; a CJK phrase can bring more than the 8 query terms. */
const BM25_TERMS = 8;

/**
 * The agent's BM25 statistics ($1 terms, $2 agent, $3 org or NULL for every org), as CTEs: `st` (rows,
 * mean distinct lexemes per row) and `idf` (the query's lexemes as one-term tsqueries `t` and their weights
 * `w`, idf = ln(1 + (N − n + 0.5)/(n + 0.5)) over the agent's rows, heaviest first), both read from the
 * tables migration 5 keeps at write time. The query's lexemes are those of its websearch text without the
 * `or`s and quotes search-text.ts put there, read with the same configuration.
 */
function bm25Ctes(schema: string): string {
  return `st AS MATERIALIZED (
         SELECT coalesce(sum(docs), 0)::float8 AS docs,
                coalesce(sum(lexemes), 0)::float8 / greatest(1, coalesce(sum(docs), 0)) AS avgdl
         FROM ${schema}.search_stats WHERE agent_id = $2 AND ($3::uuid IS NULL OR org_id = $3)),
       lexemes AS MATERIALIZED (
         SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('${searchConfig(schema)}',
           replace(replace($1, ' or ', ' '), '"', ' ')))) AS lexeme),
       idf AS MATERIALIZED (
         SELECT array_agg(term ORDER BY weight DESC, term) AS t, array_agg(weight ORDER BY weight DESC, term) AS w
         FROM (
           SELECT ('''' || replace(replace(t.lexeme, '\\', '\\\\'), '''', '''''') || '''')::tsquery AS term,
                  ln(1 + (st.docs - sum(t.docs) + 0.5) / (sum(t.docs) + 0.5)) AS weight
           FROM lexemes l
           JOIN ${schema}.search_terms t ON t.agent_id = $2 AND t.lexeme = l.lexeme
             AND ($3::uuid IS NULL OR t.org_id = $3)
           CROSS JOIN st
           GROUP BY t.lexeme, st.docs) terms)`;
}

/**
 * A matched row's BM25 score x over `m.search`, as s = x/(1+x) in [0, 1), a float4 as ts_rank's
 * normalisation 32 gave (the order JS re-sorts hits in, neighbours.ts, is then the statement's). A term
 * counts once per row: chat turns rarely repeat a word, and reading each row's positions (unnesting its
 * vector) cost three times the search. One expression per term slot rather than a subquery per row: on
 * rows this short the executor's per-row overhead is most of the cost (docs/postgres.md).
 */
const BM25_SCORE = '(bm.x / (1 + bm.x))::real';
const BM25_MATCHED = Array.from(
  { length: BM25_TERMS },
  (_, i) => `CASE WHEN m.search @@ idf.t[${i + 1}] THEN idf.w[${i + 1}] ELSE 0 END`,
).join(' + ');
const BM25_LATERAL = `LATERAL (SELECT (${BM25_MATCHED})
           * ${BM25_K1 + 1} / (1 + ${BM25_K1} * (${1 - BM25_B} + ${BM25_B} * length(m.search) / greatest(st.avgdl, 1)))
           AS x) bm`;

/** A search without neighbours; $1 terms, $2 agent, $3 org, $4 min confidence, $5 max chars, $6 limit. */
function plainSearchSql(schema: string): string {
  return `WITH ${bm25Ctes(schema)}
       SELECT ${searchColumns('m.')}, ${BM25_SCORE} AS score
       FROM ${schema}.memories m, websearch_to_tsquery('${searchConfig(schema)}', $1) AS q, st, idf, ${BM25_LATERAL}
       WHERE m.search @@ q AND ${SCOPE_M}
       ORDER BY score DESC, m.id LIMIT $6`;
}

/** A search plus the neighbours of its $7 best hits (`parent`, `next`); parameters as {@link plainSearchSql}. */
function neighbourSearchSql(schema: string): string {
  return `WITH ${bm25Ctes(schema)},
       hits AS (
         SELECT ${COLUMN_NAMES.map((c) => `m.${c}`).join(', ')}, ${BM25_SCORE} AS score
         FROM ${schema}.memories m, websearch_to_tsquery('${searchConfig(schema)}', $1) AS q, st, idf, ${BM25_LATERAL}
         WHERE m.search @@ q AND ${SCOPE_M}
         ORDER BY score DESC, m.id LIMIT $6),
       top AS (
         SELECT created_at AS at, category AS cat,
                (row_number() OVER (ORDER BY score DESC, id))::int - 1 AS parent
         FROM hits ORDER BY score DESC, id LIMIT $7)
       SELECT ${searchColumns()}, score, NULL::int AS parent, NULL::boolean AS next FROM hits
       UNION ALL
       SELECT ${searchColumns('n.')}, n.score, top.parent, n.next FROM top CROSS JOIN LATERAL (
         (SELECT ${COLUMNS}, NULL::real AS score, true AS next FROM ${schema}.memories
          WHERE ${SCOPE} AND category = top.cat AND created_at > top.at ORDER BY created_at, id LIMIT 1)
         UNION ALL
         (SELECT ${COLUMNS}, NULL::real AS score, false AS next FROM ${schema}.memories
          WHERE ${SCOPE} AND category = top.cat AND created_at < top.at ORDER BY created_at DESC, id LIMIT 1)
       ) n`;
}

/**
 * A search's rows as one row of columns: every aggregate of one SELECT reads the rows in the same order,
 * so the i-th item of each column is the i-th row. Contents are one text, split by their byte lengths once
 * encoded, so the event loop neither parses hundreds of DataRow messages nor decodes row by row.
 */
function packedSql(inner: string, neighbours: boolean): string {
  const extra = neighbours
    ? `string_agg(coalesce(r.parent::text, ''), ',') AS parents,
       string_agg(CASE r.next WHEN true THEN '1' WHEN false THEN '0' ELSE '' END, ',') AS nexts`
    : `NULL::text AS parents, NULL::text AS nexts`;
  return `SELECT count(*)::int AS n,
       string_agg(r.id::text, '') AS ids,
       string_agg(r.org_id::text || r.agent_id::text, '') AS scopes,
       string_agg(r.content, '') AS contents,
       string_agg(octet_length(r.content)::text, ',') AS lengths,
       array_agg(r.category) AS categories,
       string_agg(r.confidence::text, ',') AS confidences,
       string_agg(r.created_at::text, ',') AS created,
       string_agg(r.usefulness::text, ',') AS usefulness,
       string_agg(r.inclusions::text, ',') AS inclusions,
       string_agg(coalesce(r.score::text, ''), ',') AS scores,
       ${extra}
     FROM (${inner}) r`;
}

interface PackedRow {
  n: number;
  ids: string | null;
  scopes: string | null;
  /** Every row's content, concatenated; `lengths` are their UTF-8 byte lengths. */
  contents: string | null;
  lengths: string | null;
  categories: string[] | null;
  confidences: string | null;
  created: string | null;
  usefulness: string | null;
  inclusions: string | null;
  scores: string | null;
  parents: string | null;
  nexts: string | null;
}

/** One search row decoded from a {@link PackedRow}; `content` views the one contents buffer. */
interface HeldRow {
  id: string;
  /** `org_id` + `agent_id`, as the database has them. */
  scope: string;
  content: Uint8Array;
  category: string;
  confidence: number;
  created: number;
  usefulness: number;
  inclusions: number;
  score: number | null;
  parent: number | null;
  next: boolean | null;
}

const UUID_CHARS = 36;

function decodePacked(p: PackedRow): HeldRow[] {
  if (p.n === 0 || p.ids === null || p.contents === null) return [];
  const lengths = p.lengths!.split(',');
  const confidences = p.confidences!.split(',');
  const created = p.created!.split(',');
  const usefulness = p.usefulness!.split(',');
  const inclusions = p.inclusions!.split(',');
  const scores = p.scores!.split(',');
  const parents = p.parents?.split(',');
  const nexts = p.nexts?.split(',');
  // One UTF-8 encode of the whole text (text on the wire, not a bytea's hex: half the bytes for the database
  // to write and for node-postgres to read), then a view per row.
  const contents = Buffer.from(p.contents, 'utf8');
  const rows: HeldRow[] = [];
  let at = 0;
  for (let i = 0; i < p.n; i++) {
    const end = at + Number(lengths[i]);
    const parent = parents?.[i] ?? '';
    const next = nexts?.[i] ?? '';
    rows.push({
      id: p.ids.slice(UUID_CHARS * i, UUID_CHARS * (i + 1)),
      scope: p.scopes!.slice(2 * UUID_CHARS * i, 2 * UUID_CHARS * (i + 1)),
      content: contents.subarray(at, end),
      category: p.categories![i]!,
      confidence: Number(confidences[i]),
      created: Number(created[i]),
      usefulness: Number(usefulness[i]),
      inclusions: Number(inclusions[i]),
      score: scores[i] === '' ? null : Number(scores[i]),
      parent: parent === '' ? null : Number(parent),
      next: next === '' ? null : next === '1',
    });
    at = end;
  }
  return rows;
}

/** A decoded row as the retrieval branch's hit (fields in validateHit's order); content stays bytes. */
function heldToHit(row: HeldRow, org: string, agent: string, similarity: number, rank: number): MemoryHit {
  const hit: MemoryHit = {
    memory_id: row.id,
    org_id: org,
    agent_id: agent,
    content: row.content,
    category: row.category,
    confidence: row.confidence,
    similarity,
    rank,
    source: 'fts',
  };
  if (Number.isFinite(row.created)) hit.created_at_ms = row.created;
  setScoringInputs(hit, row.usefulness, row.inclusions);
  return hit;
}

/** A merged hit's x back to a similarity s = x/(1+x) (1 for a hit whose score was already 1). */
function similarityOf(x: number): number {
  return x === Number.MAX_VALUE ? 1 : x / (1 + x);
}

/**
 * A search-with-neighbours result split into its hits (x = s/(1−s) of their score s, in search order) and
 * the neighbours (by the hit they follow or precede).
 */
function splitByParent<
  R extends { id: string; score: number | null; parent: number | null; next: boolean | null },
>(rows: readonly R[]): { top: ScoredRow<R>[]; near: NeighbourRow<R>[] } {
  const top: ScoredRow<R>[] = [];
  const near: NeighbourRow<R>[] = [];
  for (const row of rows) {
    if (row.parent === null) {
      const s = Math.min(1, Math.max(0, row.score ?? 0));
      top.push({ row, x: s >= 1 ? Number.MAX_VALUE : s / (1 - s) });
    } else near.push({ row, parent: row.parent, next: row.next === true });
  }
  // The order `top` numbered its parents by (float4 as a double is exact).
  top.sort(byScoreThenId);
  return { top, near };
}

/** Search order: score descending, then id (as uuid and lower-case text order agree). */
function byScoreThenId(a: { x: number; row: { id: string } }, b: { x: number; row: { id: string } }): number {
  return b.x - a.x || (a.row.id < b.row.id ? -1 : a.row.id > b.row.id ? 1 : 0);
}

export class PgReads {
  readonly #pool: PgPool;
  readonly #schema: string;

  constructor(pool: PgPool, schema: string) {
    this.#pool = pool;
    this.#schema = schema;
  }

  #read<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[],
    opts: Pick<PgReadOptions, 'timeoutMs' | 'signal'>,
  ): Promise<R[]> {
    return this.#pool.read<R>(text, values, opts.timeoutMs, opts.signal);
  }

  /** Hot memories as hits with `similarity = confidence`. Throws as {@link PgPool.read}. */
  async hot(
    agent: string,
    org: string | null,
    p: { minConfidence: number; maxChars: number; limit: number },
    opts: PgReadOptions,
  ): Promise<StoreHit[]> {
    const rows = await this.#read<MemoryDbRow>(
      `SELECT ${COLUMNS} FROM ${this.#schema}.memories
       WHERE agent_id = $1 AND ($2::uuid IS NULL OR org_id = $2) AND confidence >= $3 AND content_chars <= $4
       ORDER BY created_at DESC, confidence DESC, id LIMIT $5`,
      [agent, org, p.minConfidence, p.maxChars, p.limit],
      opts,
    );
    return rows.map((row, i) => toHit(row, row.confidence, i + 1, 'hot'));
  }

  /** Full-text search for a `websearch_to_tsquery` text. Throws as {@link PgPool.read}. */
  async search(
    terms: string,
    agent: string,
    org: string | null,
    opts: PgReadOptions,
    neighbours: number,
  ): Promise<StoreHit[]> {
    if (neighbours > 0) return this.#searchWithNeighbours(terms, agent, org, opts, neighbours);
    const rows = await this.#read<MemoryDbRow & { score: number }>(
      plainSearchSql(this.#schema),
      [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, opts.limit ?? SEARCH_LIMIT],
      opts,
    );
    return rows.map((row, i) => toHit(row, Math.min(1, Math.max(0, row.score)), i + 1, 'fts'));
  }

  /**
   * Search plus neighbours in one round trip (one index seek each). A hit's score is s = x/(1+x) of its
   * BM25 score x, so x = s/(1−s) is what neighbours.ts shares out; merged hits map back with s = x/(1+x).
   */
  async #searchWithNeighbours(
    terms: string,
    agent: string,
    org: string | null,
    opts: PgReadOptions,
    parents: number,
  ): Promise<StoreHit[]> {
    const limit = opts.limit ?? SEARCH_LIMIT;
    const rows = await this.#read<
      MemoryDbRow & { score: number | null; parent: number | null; next: boolean | null }
    >(
      neighbourSearchSql(this.#schema),
      [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, limit, parents],
      opts,
    );
    // Each row keeps its score, parent and next fields: copying 600 rows without them cost more than they do.
    const { top: hits, near } = splitByParent(rows);
    return mergeNeighbours(hits, near, limit).map(({ row, x }, i) =>
      toHit(row, similarityOf(x), i + 1, 'fts'),
    );
  }

  /**
   * {@link search} for the retrieval branch, over one aggregated row ({@link packedSql}): the same hits in
   * the same order with the same ranks and similarities as validating {@link search}'s wire hits,
   * contents as UTF-8 bytes, rows of another org or agent counted in `foreign`. Throws as
   * {@link PgPool.read}.
   */
  async searchHits(
    terms: string,
    agent: string,
    org: string,
    opts: PgReadOptions,
    neighbours: number,
  ): Promise<{ hits: MemoryHit[]; foreign: number }> {
    const limit = opts.limit ?? SEARCH_LIMIT;
    const values = [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, limit];
    const text =
      neighbours > 0
        ? packedSql(neighbourSearchSql(this.#schema), true)
        : packedSql(plainSearchSql(this.#schema), false);
    const packed = await this.#read<PackedRow>(text, neighbours > 0 ? [...values, neighbours] : values, opts);
    const rows = packed[0] === undefined ? [] : decodePacked(packed[0]);
    const scope = org + agent;
    let foreign = 0;
    const hits: MemoryHit[] = [];
    const keep = (row: HeldRow, similarity: number, rank: number): void => {
      if (row.scope !== scope) foreign++;
      else hits.push(heldToHit(row, org, agent, similarity, rank));
    };
    if (neighbours === 0) {
      const scored = rows.map((row) => ({ row, x: row.score ?? 0 }));
      scored.sort(byScoreThenId);
      for (let i = 0; i < scored.length; i++)
        keep(scored[i]!.row, Math.min(1, Math.max(0, scored[i]!.x)), i + 1);
      return { hits, foreign };
    }
    const { top, near } = splitByParent(rows);
    const merged = mergeNeighbours(top, near, limit);
    for (let i = 0; i < merged.length; i++) {
      const { row, x } = merged[i]!;
      keep(row, similarityOf(x), i + 1);
    }
    return { hits, foreign };
  }

  /** The stored contract.md §4.2 envelope, or `null`. */
  async directive(
    org: string,
    agent: string,
    opts: Pick<PgReadOptions, 'timeoutMs' | 'signal'>,
  ): Promise<DirectiveEnvelope | null> {
    const rows = await this.#read<{ content: string | null; injection_mode: string; version_id: string }>(
      `SELECT content, injection_mode, version_id FROM ${this.#schema}.directives WHERE org_id = $1 AND agent_id = $2`,
      [org, agent],
      opts,
    );
    const row = rows[0];
    return row === undefined
      ? null
      : {
          v: 1 as const,
          content: row.content,
          injection_mode: row.injection_mode,
          version_id: row.version_id,
        };
  }
}
