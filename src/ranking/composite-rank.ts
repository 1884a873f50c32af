/**
 * Dedupe and score under `composite_v1` (SPEC §7): relevance for every candidate, the relevance floor,
 * then the composite. The dedupe rule is interim_v1's (score.ts): hot first, a later copy replaces the
 * kept one only if its score is strictly higher, or equal with a strictly lower rank.
 */

import { NEUTRAL_USEFULNESS } from '../retrieval/feedback.js';
import type { MemoryHit, ScoredCandidate } from '../types.js';
import { compositeScore, frequency, recency, type Weights } from './composite.js';
import { candidateRelevance } from './relevance.js';

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
  const out: ScoredCandidate[] = [];
  const position = new Map<string, number>();
  for (const list of [hot, cold]) {
    for (const hit of list) {
      const rel = relevance.get(hit.memory_id) ?? 0;
      const rec = recency(hit.category, hit.created_at_ms, o.nowMs);
      // The stores' feedback score and inclusion count (contract.md §7a); a source without them
      // (a memory service) reads as neutral and never included.
      const use = hit.usefulness ?? NEUTRAL_USEFULNESS;
      const freq = frequency(hit.inclusions ?? 0);
      const candidate: ScoredCandidate = {
        memory_id: hit.memory_id,
        org_id: hit.org_id,
        agent_id: hit.agent_id,
        content: hit.content,
        category: hit.category,
        confidence: hit.confidence,
        similarity: hit.similarity,
        rank: hit.rank,
        source: hit.source,
        score: compositeScore(
          {
            relevance: rel ** o.exponent,
            recency: rec,
            usefulness: use,
            confidence: hit.confidence,
            frequency: freq,
          },
          o.weights,
        ),
        relevance: rel,
        recency: rec,
        usefulness: use,
      };
      const at = position.get(hit.memory_id);
      if (at === undefined) {
        position.set(hit.memory_id, out.length);
        out.push(candidate);
        continue;
      }
      const kept = out[at]!;
      if (candidate.score > kept.score || (candidate.score === kept.score && candidate.rank < kept.rank)) {
        out[at] = candidate;
      }
    }
  }
  const candidates: ScoredCandidate[] = [];
  const belowFloor: ScoredCandidate[] = [];
  for (const c of out) (c.relevance! >= o.floor ? candidates : belowFloor).push(c);
  return { candidates, belowFloor };
}
