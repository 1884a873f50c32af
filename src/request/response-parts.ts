import type { TokenBudget } from '../budget/budget-calculator.js';
import { SCORE_SCHEMA } from '../ranking/score.js';
import type { RetrievalResult } from '../retrieval/retrieve.js';
import type { AssembleContextResponse } from '../wire/proto.js';
import type { ScoredCandidate } from '../wire/types.js';
import { type CallContext, monotonicNow } from './call-context.js';
import type { ValidatedRequest } from './validate.js';

/** One call once ranking is done: what both answers (CPU stage and degraded) are built from. */
export interface Assembly {
  readonly req: ValidatedRequest;
  readonly ctx: CallContext;
  readonly retrieval: RetrievalResult;
  /** Candidates within `max_memories`, canonical order (the CPU stage's indices point here). */
  readonly kept: readonly ScoredCandidate[];
  /** The CPU stage's input columns, in order: what its `selected` indexes. */
  readonly columns: readonly { memory_id: string }[];
  /** Candidates cut by `max_memories` (rows `filter`). */
  readonly filtered: readonly ScoredCandidate[];
  /** The prompt's nonce (contract.md §9) */
  readonly nonce: string;
  /** Dedupe, score and encode on the main thread, ms. */
  readonly rankingMs: number;
  /** UTF-8 bytes of the request's history (sizes the degraded answer's reserve) */
  readonly historyBytes: number;
  /** The formula that scored the candidates (default `interim_v1`). */
  readonly scoreSchema?: string;
}

/** Rounds ms half-to-even to a non-negative integer (contract.md §2 AssemblyMetrics). */
export function roundMs(ms: number): number {
  if (!(ms > 0)) return 0;
  const floor = Math.floor(ms);
  const diff = ms - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

/** The fields both answers share; the caller fills context, tokens and CPU-stage metrics. */
export function baseResponse(a: Assembly, budget: TokenBudget): AssembleContextResponse {
  const { req, ctx, retrieval, rankingMs } = a;
  const branch = (name: string) => retrieval.branches.find((b) => b.name === name)?.latency_ms ?? 0;
  return {
    assembled_context: '',
    tokens_used: 0,
    memories_included: 0,
    memories_used: [],
    directive_tokens: budget.directive_tokens,
    history_tokens: budget.messages_tokens,
    memory_tokens: 0,
    metrics: {
      budget_calculation_ms: 0,
      directive_load_ms: roundMs(branch('directive')),
      hot_memory_retrieval_ms: roundMs(branch('hot')),
      cold_memory_retrieval_ms: roundMs(branch('cold')),
      ranking_ms: roundMs(rankingMs),
      packing_ms: 0,
      formatting_ms: 0,
      total_ms: roundMs(monotonicNow() - ctx.arrival),
      candidates_evaluated: 0,
      pool_wait_us: 0,
      pool_run_us: 0,
    },
    request_id: req.requestId,
    trace_id: req.traceId,
    span_id: req.spanId,
    score_schema: a.scoreSchema ?? SCORE_SCHEMA,
    degradation: { level: 'L0', intentional: false, reasons: [], branches: [] },
  };
}
