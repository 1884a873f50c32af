/** The ranking step of one call (contract.md §7): interim_v1 or composite_v1, then the `max_memories` cut. */
import type { RankingSettings } from '../config/ranking-settings.js';
import type { RetrievalResult } from '../retrieval/retrieve.js';
import type { ScoredCandidate } from '../wire/types.js';
import { effectiveWeights, type RequestWeights } from './composite.js';
import { compositeCandidates } from './composite-rank.js';
import { applyMaxMemories, dedupeAndScore, SCORE_SCHEMA } from './score.js';

export interface RankRequest {
  maxMemories: number;
  weights?: RequestWeights | null;
  query?: string;
  /** Sized to the budget (candidate-limit.ts); absent: the configured floor. */
  floor?: number;
}

export interface Ranked {
  kept: ScoredCandidate[];
  filtered: ScoredCandidate[];
  /** Passed the floor, before `max_memories`: the CPU stage's input. */
  eligible: ScoredCandidate[];
  belowFloor: ScoredCandidate[];
  scoreSchema: string;
  relevanceWeight: number;
  floor: number;
}

/** @param lexicalHot the store is a memory service (composite-rank.ts `lexicalHot`). */
export function rankCandidates(
  req: RankRequest,
  retrieval: Pick<RetrievalResult, 'hot' | 'cold' | 'branches'>,
  ranking: RankingSettings,
  nowMs: number = Date.now(),
  lexicalHot = false,
): Ranked {
  if (ranking.scoreSchema === 'interim_v1') {
    const eligible = dedupeAndScore(retrieval.hot, retrieval.cold);
    const { kept, filtered } = applyMaxMemories(eligible, req.maxMemories);
    return {
      kept,
      filtered,
      eligible,
      belowFloor: [],
      scoreSchema: SCORE_SCHEMA,
      relevanceWeight: 0,
      floor: 0,
    };
  }
  // Without an answered search the floor would empty the context of its hot memories, so it is not applied.
  const measured = retrieval.branches.some((b) => b.name === 'cold' && b.status === 'success');
  const weights = effectiveWeights(ranking.weights, req.weights ?? null);
  const floor = measured ? (req.floor ?? ranking.relevanceFloor) : 0;
  const { candidates, belowFloor } = compositeCandidates(retrieval.hot, retrieval.cold, {
    weights,
    floor,
    exponent: ranking.relevanceExponent,
    nowMs,
    lexicalHot: lexicalHot && (req.query ?? '') !== '',
  });
  const { kept, filtered } = applyMaxMemories(candidates, req.maxMemories);
  return {
    kept,
    filtered: belowFloor.length === 0 ? filtered : belowFloor.concat(filtered),
    eligible: candidates,
    belowFloor,
    scoreSchema: 'composite_v1',
    relevanceWeight: weights.relevance,
    floor,
  };
}
