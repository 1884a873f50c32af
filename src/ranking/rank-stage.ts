/**
 * The ranking step of one call (contract.md §7), under the schema the settings name: interim_v1 (score.ts) or
 * composite_v1 (relevance, floor, composite), then the `max_memories` cut.
 */
import type { RankingSettings } from '../config/ranking-settings.js';
import type { RetrievalResult } from '../retrieval/retrieve.js';
import type { ScoredCandidate } from '../wire/types.js';
import { effectiveWeights, type RequestWeights } from './composite.js';
import { compositeCandidates } from './composite-rank.js';
import { applyMaxMemories, dedupeAndScore, SCORE_SCHEMA } from './score.js';

/** What the ranking needs of the request. */
export interface RankRequest {
  maxMemories: number;
  /** AssemblyOptions fields 3–6 when any is set (validated), else null/absent. */
  weights?: RequestWeights | null;
  /** The request's query ('' or absent: none). */
  query?: string;
  /**
   * The call's relevance floor, sized to its budget (candidate-limit.ts `planFor`); absent: the configured
   * one (`IBEX_CONTEXT_RELEVANCE_FLOOR`).
   */
  floor?: number;
}

/** One call's ranking: see {@link rankCandidates}. */
export interface Ranked {
  /** Packed from (canonical order of first appearance), within `max_memories`. */
  kept: ScoredCandidate[];
  /** Rows `filter`: below the relevance floor, then cut by `max_memories`. */
  filtered: ScoredCandidate[];
  /** Every candidate that passed the floor, before the `max_memories` cut (the CPU stage's input). */
  eligible: ScoredCandidate[];
  /** Below the relevance floor. */
  belowFloor: ScoredCandidate[];
  scoreSchema: string;
  /** w_rel of the call (0 under interim_v1). */
  relevanceWeight: number;
  /** The floor applied (0 when relevance was not measured or under interim_v1). */
  floor: number;
}

/**
 * @param lexicalHot the store is a memory service: its hot hits that the search did not return are
 *   measured lexically in the CPU stage (composite-rank.ts `lexicalHot`).
 * @returns the candidates split for the CPU stage (`eligible`, `belowFloor`) and for an answer without
 *   it (`kept`, `filtered`), the schema that ran, its w_rel and floor.
 */
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
  // Without an answered search (no query, cold skipped or failed) relevance is not measured: the floor
  // would filter every hot memory for a failure of the cold branch, so it is not applied then.
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
