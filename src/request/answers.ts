/**
 * The two answers of an assembly (contract.md §2, §10): the full one from a CPU-stage result, and the L2
 * degraded one built on the main thread when the CPU stage could not answer; plus the degradation record
 * both carry.
 */

import { calculateBudget } from '../budget/budget-calculator.js';
import type { ResolvedModel } from '../budget/catalog.js';
import { formatAssembly, measuredHistory, prepareHistory } from '../format/assembly-text.js';
import { encodeDegradedRows } from '../format/memory-rows.js';
import type { CpuStageResult } from '../pool/pool-client.js';
import { isBpeKind } from '../text/bpe.js';
import { bpeTokenBound, historyTokenBound } from '../text/bpe-bound.js';
import { monotonicNow } from '../util/clock.js';
import { Errors } from '../wire/errors.js';
import {
  ASSEMBLED_UTF8,
  type AssembleContextResponse,
  type DegradationLevel,
  MEMORY_ROWS,
} from '../wire/proto.js';
import type { BranchOutcome } from '../wire/types.js';
import { type Assembly, baseResponse, roundMs } from './response-parts.js';
import type { StageReserve } from './stage-reserve.js';
import { CONTENT_OVER, encodeHistory, type HistoryBytes } from './wire-request.js';

/**
 * Degradation level (contract.md §10): a memory source is usable iff not skipped and `success` (zero hits count).
 * Both usable ⇒ L0, one ⇒ L1, none ⇒ L2. The directive never changes the level.
 */
export function degradationLevel(branches: readonly BranchOutcome[]): DegradationLevel {
  const usable = branches.filter((b) => b.name !== 'directive' && b.status === 'success').length;
  return usable === 2 ? 'L0' : usable === 1 ? 'L1' : 'L2';
}

/**
 * Reasons for a degraded answer: each branch that did not succeed (a failed or timed-out directive too,
 * `directive_error:…` / `directive_timeout:…`, contract.md §10), plus the pool's reason.
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
 * `included` / `budget` for the kept candidates, `filter` for the cut ones, as the stage encoded them
 * ({@link MEMORY_ROWS}). Times in ms, pool figures µs.
 */
export function answerFromStage(a: Assembly, stage: CpuStageResult): AssembleContextResponse {
  const out = stage.output;
  const response = baseResponse(a, out.budget!);
  response[MEMORY_ROWS] = out.memory_rows;
  response.assembled_context = out.assembled_context;
  if (out.assembled_utf8) response[ASSEMBLED_UTF8] = out.assembled_utf8;
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
  /** Receives this answer's cost (ms) for the measured reserve of contract.md §10. */
  reserve: StageReserve;
}

/**
 * The L2 degraded answer (SPEC §10): directive + history formatted on the main thread, no memories —
 * the one allowed main-thread pass over history, on its bytes (SPEC §1): measured (one native validity
 * check and a word-at-a-time count, ~0.35 ns per byte) and spliced into the answer, never decoded. Under
 * a BPE kind (IBEX_CONTEXT_EXACT_TOKENS) nothing is BPE-counted here: directive, history and
 * `tokens_used` are upper bounds from UTF-8 byte lengths (src/budget/bpe-bound.ts), never below the
 * exact counts, so the budget stays conservative. Its pending content lengths are decided there: an over-long
 * content is still INVALID_ARGUMENT. Memory rows are `failed` / `filter` with token_estimate 0: their
 * costs were the CPU stage's, which did not run. Its cost feeds the measured reserve.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a history content over 32,768 code points;
 *   `IBEX_ERR_DEADLINE_EXCEEDED` when the history's bytes went with a CPU task that never came back.
 */
export function degradedAnswer(a: Assembly, opts: DegradedAnswerOptions): AssembleContextResponse {
  const { req, ctx, retrieval } = a;
  const start = monotonicNow();
  const h = req.history;
  if (historyLost(h)) throw Errors.deadlineExceeded();
  const kind = opts.resolved.policy.estimate_kind;
  // Never a BPE count here: history and directive are measured from their bytes, their tokens bounded.
  const bounded = isBpeKind(kind);
  const prepared = bounded ? measuredHistory(h) : prepareHistory(h, kind, h.contentPending);
  if (prepared === null) throw Errors.invalidArgument('message.content', CONTENT_OVER);
  const directive = retrieval.directive?.content ?? null;
  const budget = calculateBudget({
    model: opts.resolved,
    directive,
    recentMessages: prepared.measure ?? prepared.messages,
    toolSchemas: [],
    nonceBytes: opts.nonceBytes,
    availableTokens: req.availableTokens,
    counted:
      bounded && prepared.measure
        ? {
            directive: bpeTokenBound(Buffer.byteLength(directive ?? '', 'utf8')),
            messages: historyTokenBound(h, prepared.measure),
          }
        : undefined,
  });
  const response = baseResponse(a, budget);
  response[MEMORY_ROWS] = encodeDegradedRows(a.kept, a.filtered);
  const formatted = formatAssembly(h, prepared, kind, {
    directive,
    memories: [],
    toolSchemas: [],
    nonce: a.nonce,
  });
  response[ASSEMBLED_UTF8] = formatted.text;
  response.tokens_used = formatted.tokens_used;
  response.metrics.candidates_evaluated = a.kept.length;
  const end = monotonicNow();
  opts.reserve.recordDegraded(end - start, a.historyBytes);
  response.metrics.total_ms = roundMs(end - ctx.arrival);
  return response;
}

const WARM_ROW = { memory_id: 'warm', category: 'fact', score: 0.5, similarity: 0.5, confidence: 1, rank: 1 };

/**
 * Runs the degraded answer's byte path (measure, budget, spliced format, rows) on a small history a few
 * times, so that the first late CPU stage does not pay ~5–10 ms of cold code inside its D: the degraded
 * answer keeps only a few ms of reserve (contract.md §10), and nothing else runs this path on the main thread.
 */
export function warmDegradedAnswer(resolved: ResolvedModel, rounds = 20): void {
  const h = encodeHistory([
    { role: 'user', content: 'hello 😀 漢' },
    { role: ' assistant ', content: 'hi' },
  ]);
  const kind = resolved.policy.estimate_kind;
  for (let i = 0; i < rounds; i++) {
    const prepared = prepareHistory(h, kind, true);
    if (!prepared) return;
    const history = prepared.measure ?? prepared.messages;
    calculateBudget({
      model: resolved,
      directive: 'Be brief.',
      recentMessages: history,
      toolSchemas: [],
      nonceBytes: 16,
    });
    formatAssembly(h, prepared, kind, {
      directive: 'Be brief.',
      memories: [],
      toolSchemas: [],
      nonce: 'warm',
    });
    encodeDegradedRows([WARM_ROW], [WARM_ROW]);
  }
}

/**
 * Whether the history's bytes are gone: the request buffer was transferred to a CPU task that was
 * dispatched and then abandoned at its deadline (it returns them only with its result). A detached
 * buffer has length 0 while the spans still point into it.
 */
export function historyLost(h: HistoryBytes): boolean {
  return h.count > 0 && h.source.byteLength < h.spans[4 * h.count - 1]!;
}
