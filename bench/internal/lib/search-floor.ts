/**
 * `bench:internal -- floor`'s search floor: the embedded store's FTS5 search measured in-process over the
 * LoCoMo queries, µs per query, and where one search's time goes.
 */
import Database from 'better-sqlite3';
import {
  DEFAULT_MAX_MEMORY_CHARS,
  EmbeddedStore,
  searchSql,
} from '../../../src/retrieval/sqlite/embedded-store.js';
import { scopeToken } from '../../../src/retrieval/store-rows.js';
import { toFtsQuery } from '../../../src/text/fts-query.js';
import { median } from '../../../src/tools/client/stats.js';

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * µs per item of `run` over `items`, one pass per round after one unmeasured pass (SQLite's cache and the
 * JIT warmed by it).
 */
function passesUs<T>(items: readonly T[], rounds: number, run: (item: T) => unknown): number[] {
  for (const item of items) run(item);
  const passes: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const start = performance.now();
    for (const item of items) run(item);
    passes.push(r3(((performance.now() - start) * 1000) / items.length));
  }
  return passes;
}

/** µs per query of the store's search over `queries`, per pass, and the hits it returns per query. */
export function searchPasses(
  db: string,
  queries: readonly { org: string; agent: string; text: string }[],
  rounds: number,
) {
  const store = EmbeddedStore.open(db, { cache: false });
  try {
    let hits = 0;
    for (const q of queries) hits += store.search(q.org, q.agent, q.text).length;
    const passes = passesUs(queries, rounds, (q) => store.search(q.org, q.agent, q.text));
    return { passes, mean_hits: r3(hits / queries.length) };
  } finally {
    store.close();
  }
}

/**
 * Where one search's time goes, and one alternative, µs per query over the same queries (median of
 * `rounds` passes, {@link passesUs}), on a read-only connection of the bench's own:
 * - `matches`: counting the agent's matches only (`count(*)` of the same MATCH: no ranking, no rows);
 * - `ranked`: the store's inner statement (bm25 over every match, best 20 rowids: searchSql's subquery);
 * - `rowid_range`: the store's statement with the agent's rows found by a rowid range instead of the
 *   scope token (valid here because an ingest writes one agent after another, so each agent's rows are one
 *   range; `range_top10_same` counts the queries whose top-10 ids and scores equal the store's).
 */
export function searchBreakdown(
  db: string,
  queries: readonly { org: string; agent: string; text: string }[],
  rounds: number,
) {
  const conn = new Database(db, { readonly: true });
  try {
    const ranges = new Map<string, { lo: number; hi: number }>();
    const byAgent = conn.prepare<[], { org_id: string; agent_id: string; lo: number; hi: number }>(
      'SELECT org_id, agent_id, min(pk) AS lo, max(pk) AS hi FROM memories GROUP BY org_id, agent_id',
    );
    for (const r of byAgent.all()) ranges.set(`${r.org_id}|${r.agent_id}`, { lo: r.lo, hi: r.hi });
    const statements = {
      matches: conn.prepare('SELECT count(*) FROM memories_fts WHERE memories_fts MATCH @match'),
      ranked: conn.prepare(
        'SELECT rowid, bm25(memories_fts, 1.0, 0.0) AS score FROM memories_fts WHERE memories_fts MATCH @match ' +
          'ORDER BY score LIMIT 20',
      ),
      store: conn.prepare(searchSql('10')),
      rowid_range: conn.prepare(
        searchSql('10').replace(
          'WHERE memories_fts MATCH @match',
          'WHERE memories_fts MATCH @terms AND rowid BETWEEN @lo AND @hi',
        ),
      ),
    };
    const params = queries.flatMap((q) => {
      const terms = toFtsQuery(q.text);
      const range = ranges.get(`${q.org}|${q.agent}`);
      if (terms === null || range === undefined) return [];
      const common = { org: q.org, agent: q.agent, minConfidence: 0, maxChars: DEFAULT_MAX_MEMORY_CHARS };
      return [
        {
          ...common,
          match: `scope:${scopeToken(q.org, q.agent)} AND content:(${terms})`,
          terms: `content:(${terms})`,
          lo: range.lo,
          hi: range.hi,
        },
      ];
    });
    const key = (rows: unknown[]) =>
      (rows as { id: string; score: number }[]).map((r) => `${r.id} ${r.score}`).join(',');
    let same = 0;
    for (const p of params) {
      if (key(statements.store.all(p)) === key(statements.rowid_range.all(p))) same++;
    }
    const timed = (name: keyof typeof statements) =>
      r3(median(passesUs(params, rounds, (p) => statements[name].all(p))));
    return {
      queries: params.length,
      matches_us: timed('matches'),
      ranked_us: timed('ranked'),
      store_us: timed('store'),
      rowid_range_us: timed('rowid_range'),
      range_top10_same: same,
    };
  } finally {
    conn.close();
  }
}
