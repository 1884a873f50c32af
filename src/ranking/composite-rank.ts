/** Dedupe and score under `composite_v1` (contract.md §7); the dedupe rule is interim_v1's (score.ts). */

import { NEUTRAL_USEFULNESS } from '../retrieval/feedback.js';
import { relevanceTerm } from '../text/relevance-term.js';
import type { MemoryHit, ScoredCandidate } from '../wire/types.js';
import { compositeScore, frequency, recency, type Weights } from './composite.js';
import { candidateRelevance } from './relevance.js';
import { dedupeScored, scoredCandidate } from './score.js';

export { NEUTRAL_USEFULNESS } from '../retrieval/feedback.js';

export interface CompositeOptions {
  weights: Weights;
  floor: number;
  exponent: number;
  nowMs: number;
  /** A memory service with a query: its hot hits missing from the search get NaN, measured in the CPU stage. */
  lexicalHot?: boolean;
}

/** @returns deduped `candidates` at or above the floor (first-appearance order), and `belowFloor`. */
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
    // Sources without feedback (a memory service) read as neutral and never included.
    const use = hit.usefulness ?? NEUTRAL_USEFULNESS;
    const score = compositeScore(
      {
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
  // NaN passes: the CPU stage applies the floor to it.
  for (const c of out) (!(c.relevance! < o.floor) ? candidates : belowFloor).push(c);
  return { candidates, belowFloor };
}
