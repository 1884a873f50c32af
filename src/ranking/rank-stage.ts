/**
 * The ranking step of one call (SPEC §7), under the schema the settings name: interim_v1 (score.ts) or
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
}

/**
 * @returns `kept` (packed from, canonical order of first appearance), `filtered` (rows `filter`: below
 *   the relevance floor, then cut by `max_memories`) and the schema that ran.
 */
export function rankCandidates(
  req: RankRequest,
  retrieval: Pick<RetrievalResult, 'hot' | 'cold' | 'branches'>,
  ranking: RankingSettings,
  nowMs: number = Date.now(),
): { kept: ScoredCandidate[]; filtered: ScoredCandidate[]; scoreSchema: string } {
  if (ranking.scoreSchema === 'interim_v1') {
    const { kept, filtered } = applyMaxMemories(
      dedupeAndScore(retrieval.hot, retrieval.cold),
      req.maxMemories,
    );
    return { kept, filtered, scoreSchema: SCORE_SCHEMA };
  }
  // Without an answered search (no query, cold skipped or failed) relevance is not measured: the floor
  // would filter every hot memory for a failure of the cold branch, so it is not applied then.
  const measured = retrieval.branches.some((b) => b.name === 'cold' && b.status === 'success');
  const { candidates, belowFloor } = compositeCandidates(retrieval.hot, retrieval.cold, {
    weights: effectiveWeights(ranking.weights, req.weights ?? null),
    floor: measured ? ranking.relevanceFloor : 0,
    nowMs,
  });
  const { kept, filtered } = applyMaxMemories(candidates, req.maxMemories);
  return {
    kept,
    filtered: belowFloor.length === 0 ? filtered : belowFloor.concat(filtered),
    scoreSchema: 'composite_v1',
  };
}
