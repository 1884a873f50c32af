/**
 * A complete, valid AssembleContextResponse for tests that inject their own `assemble` (server plumbing,
 * auth, fuzzing, client tools): every field present, zero metrics, level L0. Tests override what they
 * assert on.
 */

import type { ValidatedRequest } from '../../src/request/validate.js';
import type { AssembleContextResponse, AssemblyMetrics, MemoryUsed } from '../../src/wire/proto.js';

/** All-zero metrics. */
export const ZERO_METRICS: AssemblyMetrics = {
  budget_calculation_ms: 0,
  directive_load_ms: 0,
  hot_memory_retrieval_ms: 0,
  cold_memory_retrieval_ms: 0,
  ranking_ms: 0,
  packing_ms: 0,
  formatting_ms: 0,
  total_ms: 0,
  candidates_evaluated: 0,
  pool_wait_us: 0,
  pool_run_us: 0,
};

/**
 * One `memories_used` row: `memory_id` and what the test sets over mid-range defaults (scores 0.5, recency
 * and usefulness 0, rank 1, `episodic`, included, 10 tokens).
 */
export function usedRow(fields: Partial<MemoryUsed> & Pick<MemoryUsed, 'memory_id'>): MemoryUsed {
  return {
    composite_score: 0.5,
    relevance_score: 0.5,
    recency_score: 0,
    usefulness_score: 0,
    rank: 1,
    category: 'episodic',
    exclusion: 'included',
    similarity: 0.5,
    confidence: 0.5,
    token_estimate: 10,
    ...fields,
  };
}

/**
 * @param req echoes its request/trace/span ids when given.
 * @param fields overrides (shallow), e.g. `{ assembled_context: '…', metrics: {...ZERO_METRICS, total_ms: 1} }`.
 */
export function stubResponse(
  req?: Pick<ValidatedRequest, 'requestId' | 'traceId' | 'spanId'>,
  fields: Partial<AssembleContextResponse> = {},
): AssembleContextResponse {
  return {
    assembled_context: '',
    tokens_used: 0,
    memories_included: 0,
    memories_used: [],
    directive_tokens: 0,
    history_tokens: 0,
    memory_tokens: 0,
    metrics: ZERO_METRICS,
    request_id: req?.requestId ?? '',
    trace_id: req?.traceId ?? '',
    span_id: req?.spanId ?? '',
    score_schema: 'interim_v1',
    degradation: { level: 'L0', intentional: false, reasons: [], branches: [] },
    ...fields,
  };
}
