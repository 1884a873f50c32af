/** The PostgreSQL store's read statements; ids arrive checked, caching is the store's. */
import type pg from 'pg';
import type { MemoryHit } from '../../wire/types.js';
import { mergeNeighbours, type NeighbourRow, type ScoredRow } from '../neighbours.js';
import type { DirectiveEnvelope, StoreHit } from '../store-rows.js';
import { type MemoryDbRow as StoreDbRow, toHit } from '../store-rows.js';
import { SEARCH_LIMIT, setScoringInputs } from '../validate.js';
import type { PgPool } from './pg-pool.js';

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

/** Turns one scoped row into what a read returns: a wire hit (`toHit`) or a retrieval hit (`toMemoryHit`). */
export type RowMapper<T> = (row: MemoryDbRow, similarity: number, rank: number, source: 'hot' | 'fts') => T;

/**
 * A row as the retrieval branch's hit, built directly: the same fields `validateHit` reads from the wire
 * shape, without the round trip through an ISO date and three UUID checks per row (the database typed and
 * scoped them; the caller still compares org and agent).
 */
export function toMemoryHit(
  row: MemoryDbRow,
  similarity: number,
  rank: number,
  source: 'hot' | 'fts',
): MemoryHit {
  const hit: MemoryHit = {
    memory_id: row.id,
    org_id: row.org_id,
    agent_id: row.agent_id,
    content: row.content,
    category: row.category,
    confidence: row.confidence,
    similarity,
    rank,
    source,
  };
  const at = typeof row.created_at === 'number' ? row.created_at : row.created_at.getTime();
  if (Number.isFinite(at)) hit.created_at_ms = at;
  // As the wire hit carries them (toHit): the count as a number.
  setScoringInputs(hit, row.usefulness, row.inclusions === undefined ? undefined : Number(row.inclusions));
  return hit;
}

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
  async search<T = StoreHit>(
    terms: string,
    agent: string,
    org: string | null,
    opts: PgReadOptions,
    neighbours: number,
    map: RowMapper<T> = toHit as RowMapper<T>,
  ): Promise<T[]> {
    if (neighbours > 0) return this.#searchWithNeighbours(terms, agent, org, opts, neighbours, map);
    const rows = await this.#read<MemoryDbRow & { score: number }>(
      `SELECT ${searchColumns()}, ts_rank(search, q, 1|32) AS score
       FROM ${this.#schema}.memories, websearch_to_tsquery('simple', $1) AS q
       WHERE search @@ q AND agent_id = $2 AND ($3::uuid IS NULL OR org_id = $3)
         AND confidence >= $4 AND content_chars <= $5
       ORDER BY score DESC, id LIMIT $6`,
      [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, opts.limit ?? SEARCH_LIMIT],
      opts,
    );
    return rows.map((row, i) => map(row, Math.min(1, Math.max(0, row.score)), i + 1, 'fts'));
  }

  /**
   * Search plus neighbours in one round trip (one index seek each). ts_rank(…, 32) is s = rank/(rank+1),
   * so x = s/(1−s) is the rank that neighbours.ts shares out; merged hits map back with s = x/(1+x).
   */
  async #searchWithNeighbours<T>(
    terms: string,
    agent: string,
    org: string | null,
    opts: PgReadOptions,
    parents: number,
    map: RowMapper<T>,
  ): Promise<T[]> {
    const limit = opts.limit ?? SEARCH_LIMIT;
    const scope = `agent_id = $2 AND ($3::uuid IS NULL OR org_id = $3) AND confidence >= $4 AND content_chars <= $5`;
    const rows = await this.#read<
      MemoryDbRow & { score: number | null; parent: number | null; next: boolean | null }
    >(
      `WITH hits AS (
         SELECT ${COLUMNS}, ts_rank(search, q, 1|32) AS score
         FROM ${this.#schema}.memories, websearch_to_tsquery('simple', $1) AS q
         WHERE search @@ q AND ${scope}
         ORDER BY score DESC, id LIMIT $6),
       top AS (
         SELECT created_at AS at, category AS cat,
                (row_number() OVER (ORDER BY score DESC, id))::int - 1 AS parent
         FROM hits ORDER BY score DESC, id LIMIT $7)
       SELECT ${searchColumns()}, score, NULL::int AS parent, NULL::boolean AS next FROM hits
       UNION ALL
       SELECT ${searchColumns('n.')}, n.score, top.parent, n.next FROM top CROSS JOIN LATERAL (
         (SELECT ${COLUMNS}, NULL::real AS score, true AS next FROM ${this.#schema}.memories
          WHERE ${scope} AND category = top.cat AND created_at > top.at ORDER BY created_at, id LIMIT 1)
         UNION ALL
         (SELECT ${COLUMNS}, NULL::real AS score, false AS next FROM ${this.#schema}.memories
          WHERE ${scope} AND category = top.cat AND created_at < top.at ORDER BY created_at DESC, id LIMIT 1)
       ) n`,
      [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, limit, parents],
      opts,
    );
    const hits: ScoredRow<MemoryDbRow>[] = [];
    const near: NeighbourRow<MemoryDbRow>[] = [];
    // Each row keeps its score, parent and next fields: copying 600 rows without them cost more than they do.
    for (const row of rows) {
      if (row.parent === null) {
        const s = Math.min(1, Math.max(0, row.score ?? 0));
        hits.push({ row, x: s >= 1 ? Number.MAX_VALUE : s / (1 - s) });
      } else near.push({ row, parent: row.parent, next: row.next === true });
    }
    // The order `top` numbered its parents by (float4 as a double is exact).
    hits.sort((a, b) => b.x - a.x || (a.row.id < b.row.id ? -1 : a.row.id > b.row.id ? 1 : 0));
    return mergeNeighbours(hits, near, limit).map(({ row, x }, i) =>
      map(row, x === Number.MAX_VALUE ? 1 : x / (1 + x), i + 1, 'fts'),
    );
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
