/**
 * The two answers of an assembly (SPEC §2, §10): the full one from a CPU-stage result, and the L2
 * degraded one built on the main thread when the CPU stage could not answer; plus the degradation record
 * both carry.
 */
import { calculateBudget } from '../budget/budget-calculator.js';
import type { ResolvedModel } from '../budget/catalog.js';
import { codePointLength, estimateTokens } from '../budget/estimate.js';
import { Errors } from '../errors.js';
import { formatContext } from '../format/formatter.js';
import type { CpuStageResult } from '../pool/pool-client.js';
import type { BranchOutcome } from '../types.js';
import { monotonicNow } from '../util/clock.js';
import { LIMITS } from './limits.js';
import {
  ASSEMBLED_UTF8,
  type AssembleContextResponse,
  type DegradationLevel,
  type MemoryUsed,
} from './proto.js';
import { type Assembly, baseResponse, roundMs, usedRow } from './response-parts.js';
import type { StageReserve } from './stage-reserve.js';
import { CONTENT_OVER, decodeHistory } from './wire-request.js';

/**
 * Degradation level (SPEC §10): a memory source is usable iff not skipped and `success` (zero hits count).
 * Both usable ⇒ L0, one ⇒ L1, none ⇒ L2. The directive never changes the level.
 */
export function degradationLevel(branches: readonly BranchOutcome[]): DegradationLevel {
  const usable = branches.filter((b) => b.name !== 'directive' && b.status === 'success').length;
  return usable === 2 ? 'L0' : usable === 1 ? 'L1' : 'L2';
}

/**
 * Reasons for a degraded answer: each branch that did not succeed (a failed or timed-out directive too,
 * `directive_error:…` / `directive_timeout:…`, SPEC §10 as updated by issue 11), plus the pool's reason.
 */
export function degradationReasons(branches: readonly BranchOutcome[], poolReason: string | null): string[] {
  const reasons: string[] = [];
  for (const b of branches) {
    if (b.status === 'success') continue;
    if (b.name === 'directive' && b.status === 'skipped') continue;
    reasons.push(b.status === 'skipped' ? `${b.name}_skipped` : `${b.name}_${b.status}:${b.detail}`);
  }
  if (poolReason) reasons.push(poolReason);
  return reasons;
}

/**
 * The full answer from a CPU-stage result: its budget, costs, pack, context and tokens_used; memory rows
 * `included` / `budget` for the kept candidates, `filter` for the cut ones. Times in ms, pool figures µs.
 */
export function answerFromStage(a: Assembly, stage: CpuStageResult): AssembleContextResponse {
  const out = stage.output;
  const { kept, filtered } = a;
  const rows: MemoryUsed[] = [];
  for (const i of out.selected) rows.push(usedRow(kept[i]!, 'included', out.costs[i]!));
  for (const i of out.excluded) rows.push(usedRow(kept[i]!, 'budget', out.costs[i]!));
  filtered.forEach((c, j) => {
    rows.push(usedRow(c, 'filter', out.costs[kept.length + j]!));
  });
  const response = baseResponse(a, out.budget!, rows);
  response.assembled_context = out.assembled_context;
  if (out.assembled_utf8.length > 0) response[ASSEMBLED_UTF8] = out.assembled_utf8;
  response.tokens_used = out.tokens_used ?? 0;
  response.memories_included = out.memories_included;
  response.memory_tokens = out.pack.total_tokens;
  const m = response.metrics;
  m.budget_calculation_ms = roundMs(out.budget_us / 1000);
  m.packing_ms = roundMs(out.pack_us / 1000);
  m.formatting_ms = roundMs(out.format_us / 1000);
  m.candidates_evaluated = out.pack.candidates_evaluated;
  m.pool_wait_us = Math.min(2 ** 31 - 1, Math.max(0, Math.round(stage.wait_us)));
  m.pool_run_us = Math.min(2 ** 31 - 1, Math.max(0, Math.round(stage.run_us)));
  m.total_ms = roundMs(monotonicNow() - a.ctx.arrival);
  return response;
}

/** What the degraded answer needs besides the call itself. */
export interface DegradedAnswerOptions {
  /** The request's model, resolved (its budget is computed here). */
  resolved: ResolvedModel;
  /** IBEX_CONTEXT_NONCE_BYTES. */
  nonceBytes: number;
  /** Receives this answer's cost (ms) for the measured reserve of SPEC §10. */
  reserve: StageReserve;
}

/**
 * The L2 degraded answer (SPEC §10): directive + history formatted on the main thread, no memories —
 * the one allowed main-thread pass over history, which is decoded for it (and its pending content
 * lengths decided: an over-long content is still INVALID_ARGUMENT). Memory rows are `failed` /
 * `filter` with token_estimate 0: their costs were the CPU stage's, which did not run. Its cost feeds
 * the measured reserve.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a history content over 32,768 code points.
 */
export function degradedAnswer(a: Assembly, opts: DegradedAnswerOptions): AssembleContextResponse {
  const { req, ctx, retrieval } = a;
  const start = monotonicNow();
  const messages = decodeHistory(req.history);
  if (req.history.contentPending) {
    for (const m of messages) {
      if (m.content.length > LIMITS.contentChars && codePointLength(m.content) > LIMITS.contentChars)
        throw Errors.invalidArgument('message.content', CONTENT_OVER);
    }
  }
  const directive = retrieval.directive?.content ?? null;
  const budget = calculateBudget({
    model: opts.resolved,
    directive,
    recentMessages: messages,
    toolSchemas: [],
    nonceBytes: opts.nonceBytes,
    availableTokens: req.availableTokens,
  });
  const rows = [
    ...a.kept.map((c) => usedRow(c, 'failed', 0)),
    ...a.filtered.map((c) => usedRow(c, 'filter', 0)),
  ];
  const response = baseResponse(a, budget, rows);
  response.assembled_context = formatContext({
    directive,
    recentMessages: messages,
    memories: [],
    toolSchemas: [],
    nonce: a.nonce,
  }).assembled_context;
  response.tokens_used = estimateTokens(response.assembled_context, budget.estimate_kind);
  response.metrics.candidates_evaluated = a.kept.length;
  const end = monotonicNow();
  opts.reserve.recordDegraded(end - start, a.historyBytes);
  response.metrics.total_ms = roundMs(end - ctx.arrival);
  return response;
}
