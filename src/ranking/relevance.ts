/**
 * Query relevance in [0, 1] for every candidate, on one scale (contract.md §7).
 *
 * - A cold hit of the project's stores (`source = "fts"`) carries s = x/(1+x) of its text-search score x
 *   (embedded: x = −bm25 of FTS5; PostgreSQL: x = ts_rank, normalisation 32). x is recovered as s/(1−s)
 *   and scaled by the call's best: relevance = x / x_best. The best match of the query is 1, a match half
 *   as strong 0.5; the knapsack then values a memory by how well it matches compared with what else
 *   matched, which the raw s (0.83–0.94 for most LoCoMo hits) could not tell apart.
 * - A cold hit of a memory service (`vector` and other sources) keeps its similarity: it is already a
 *   query relevance in [0, 1].
 * - A hot hit that is also a cold hit takes the cold hit's relevance (same memory, same query).
 * - A hot hit of the project's stores that the search did not return, when the search returned fewer hits
 *   than asked for, shares no search term with the query: relevance 0 (exact). When the search was cut
 *   at its limit, such a hit is known to rank below every returned hit; it gets 0 too (the limit is sized
 *   to fill the budget several times over: candidate-limit.ts).
 * - Any other hot hit (a memory service's: its similarity is a write-time score) gets 0 here: without a
 *   query measure it is not a candidate for its recency alone.
 */
import type { MemoryHit } from '../wire/types.js';

/** Sources whose similarity is x/(1+x) of a text-search score (the project's stores). */
const TEXT_SEARCH_SOURCES = new Set(['fts']);

/** x of s = x/(1+x), for s in [0, 1); ∞ for s = 1. */
function searchScoreOf(similarity: number): number {
  return similarity >= 1 ? Number.POSITIVE_INFINITY : similarity / (1 - similarity);
}

/**
 * Relevance of each cold hit, same order.
 * @param cold validated cold hits of one call.
 */
export function coldRelevance(cold: readonly MemoryHit[]): Float64Array {
  const out = new Float64Array(cold.length);
  let best = 0;
  for (const hit of cold) {
    if (TEXT_SEARCH_SOURCES.has(hit.source)) best = Math.max(best, searchScoreOf(hit.similarity));
  }
  for (let i = 0; i < cold.length; i++) {
    const hit = cold[i]!;
    if (!TEXT_SEARCH_SOURCES.has(hit.source)) out[i] = hit.similarity;
    else if (best === Number.POSITIVE_INFINITY) out[i] = hit.similarity >= 1 ? 1 : 0;
    else out[i] = best > 0 ? searchScoreOf(hit.similarity) / best : 0;
  }
  return out;
}

/**
 * Relevance by memory id for a call's hot and cold hits (see the module TSDoc for each case).
 * @returns a map from memory_id to relevance in [0, 1]; every hit of `hot` and `cold` has an entry.
 */
export function candidateRelevance(
  hot: readonly MemoryHit[],
  cold: readonly MemoryHit[],
): Map<string, number> {
  const byId = new Map<string, number>();
  const rel = coldRelevance(cold);
  for (let i = 0; i < cold.length; i++) {
    const id = cold[i]!.memory_id;
    byId.set(id, Math.max(byId.get(id) ?? 0, rel[i]!));
  }
  for (const hit of hot) if (!byId.has(hit.memory_id)) byId.set(hit.memory_id, 0);
  return byId;
}
