/**
 * Dedupe and score under `composite_v1` (contract.md §7): relevance for every candidate, the relevance floor,
 * then the composite. The dedupe rule is interim_v1's (score.ts): hot first, a later copy replaces the
 * kept one only if its score is strictly higher, or equal with a strictly lower rank.
 */

import { NEUTRAL_USEFULNESS } from '../retrieval/feedback.js';
import type { MemoryHit, ScoredCandidate } from '../wire/types.js';
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
  const out: ScoredCandidate[] = [];
  const position = new Map<string, number>();
  for (const list of [hot, cold]) {
    for (const hit of list) {
      const rel = relevance.get(hit.memory_id) ?? 0;
      const measured = !Number.isNaN(rel);
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
        created_at_ms: hit.created_at_ms,
        score: compositeScore(
          {
            relevance: measured ? rel ** o.exponent : 0,
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
  // NaN (measured in the CPU stage) passes here: the CPU stage applies the floor to it.
  for (const c of out) (!(c.relevance! < o.floor) ? candidates : belowFloor).push(c);
  return { candidates, belowFloor };
}
