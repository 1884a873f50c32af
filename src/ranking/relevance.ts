/** Query relevance in [0, 1] on one scale for every candidate (contract.md §7; cases in docs/scoring.md). */
import type { MemoryHit } from '../wire/types.js';

/** Sources whose similarity is x/(1+x) of a text-search score. */
const TEXT_SEARCH_SOURCES = new Set(['fts']);

function searchScoreOf(similarity: number): number {
  return similarity >= 1 ? Number.POSITIVE_INFINITY : similarity / (1 - similarity);
}

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

/** @returns relevance by memory_id; every hot and cold hit has an entry. */
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
