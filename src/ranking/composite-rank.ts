/**
 * Dedupe and score under `composite_v1` (SPEC §7): relevance for every candidate, the relevance floor,
 * then the composite. The dedupe rule is interim_v1's (score.ts): hot first, a later copy replaces the
 * kept one only if its score is strictly higher, or equal with a strictly lower rank.
 */
import type { MemoryHit, ScoredCandidate } from '../wire/types.js';
import { compositeScore, frequency, recency, type Weights } from './composite.js';
import { candidateRelevance } from './relevance.js';

/**
 * Usefulness of a memory without recorded feedback: neutral, as the memory service starts it; feedback
 * moves it toward 1 or 0 (SPEC §7a).
 */
export const NEUTRAL_USEFULNESS = 0.5;

/** What one call scores with. */
export interface CompositeOptions {
  weights: Weights;
  /** Relevance floor in [0, 0.5): a candidate below it is `filter`. */
  floor: number;
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
            relevance: rel,
            recency: rec,
            usefulness: NEUTRAL_USEFULNESS,
            confidence: hit.confidence,
            frequency: frequency(0),
          },
          o.weights,
        ),
        relevance: rel,
        recency: rec,
        usefulness: NEUTRAL_USEFULNESS,
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
