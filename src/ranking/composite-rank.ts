/**
 * Dedupe and score under `composite_v1` (contract.md §7): relevance for every candidate, the relevance floor,
 * then the composite. The dedupe rule is interim_v1's (score.ts): hot first, a later copy replaces the
 * kept one only if its score is strictly higher, or equal with a strictly lower rank.
 */

import { NEUTRAL_USEFULNESS } from '../retrieval/feedback.js';
import { relevanceTerm } from '../text/relevance-term.js';
import type { MemoryHit, ScoredCandidate } from '../wire/types.js';
import { compositeScore, frequency, recency, type Weights } from './composite.js';
import { candidateRelevance } from './relevance.js';
import { dedupeScored, scoredCandidate } from './score.js';

export { NEUTRAL_USEFULNESS } from '../retrieval/feedback.js';

/** What one call scores with. */
export interface CompositeOptions {
  weights: Weights;
  /** Relevance floor in [0, 0.5): a candidate below it is `filter`. */
  floor: number;
  /** The composite's relevance term is relevance ** exponent (≥ 1; composite.ts). */
  exponent: number;
  /** Now, epoch ms (recency). */
  nowMs: number;
  /**
   * The store is a memory service and the call has a query: a hot hit the search did not return gets
   * relevance NaN, measured lexically in the CPU stage (src/cpu-stage/cpu-filters.ts), which applies the
   * floor to it; its score here lacks the relevance term.
   */
  lexicalHot?: boolean;
}

/**
 * @returns `candidates` (relevance ≥ floor, deduped, order of first appearance) with their composite
 *   score and inputs, and `belowFloor` (rows `filter`).
 */
export function compositeCandidates(
  hot: readonly MemoryHit[],
  cold: readonly MemoryHit[],
  o: CompositeOptions,
): { candidates: ScoredCandidate[]; belowFloor: ScoredCandidate[] } {
  const relevance = candidateRelevance(hot, cold);
  if (o.lexicalHot) {
    const searched = new Set<string>();
    for (const hit of cold) searched.add(hit.memory_id);
    for (const hit of hot) if (!searched.has(hit.memory_id)) relevance.set(hit.memory_id, Number.NaN);
  }
  const out = dedupeScored(hot, cold, (hit) => {
    const rel = relevance.get(hit.memory_id) ?? 0;
    const rec = recency(hit.category, hit.created_at_ms, o.nowMs);
    // The stores' feedback score and inclusion count (contract.md §7a); a source without them
    // (a memory service) reads as neutral and never included.
    const use = hit.usefulness ?? NEUTRAL_USEFULNESS;
    const score = compositeScore(
      {
        // NaN (measured in the CPU stage) adds its term there.
        relevance: Number.isNaN(rel) ? 0 : relevanceTerm(rel, o.exponent),
        recency: rec,
        usefulness: use,
        confidence: hit.confidence,
        frequency: frequency(hit.inclusions ?? 0),
      },
      o.weights,
    );
    const candidate = scoredCandidate(hit, score);
    candidate.relevance = rel;
    candidate.recency = rec;
    candidate.usefulness = use;
    return candidate;
  });
  const candidates: ScoredCandidate[] = [];
  const belowFloor: ScoredCandidate[] = [];
  // NaN (measured in the CPU stage) passes here: the CPU stage applies the floor to it.
  for (const c of out) (!(c.relevance! < o.floor) ? candidates : belowFloor).push(c);
  return { candidates, belowFloor };
}
