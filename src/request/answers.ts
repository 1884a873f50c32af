/** The full answer from a CPU-stage result and the degraded one built on the main thread (contract.md §2, §10). */

import { calculateBudget, fixedPartsTokens, type TokenBudget } from '../budget/budget-calculator.js';
import type { ResolvedModel } from '../budget/catalog.js';
import type { AssemblyParts, PreparedHistory } from '../format/assembly-text.js';
import { formatAssembly, measuredHistory } from '../format/assembly-text.js';
import { boundHistory, type SplicedMemory } from '../format/history-utf8.js';
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
import {
  DEGRADED_MEMORY_TEXT_BYTES,
  type DegradedSelection,
  dropLastMemory,
  selectDegradedMemories,
} from './degraded-memories.js';
import { type Assembly, baseResponse, roundMs } from './response-parts.js';
import type { StageReserve } from './stage-reserve.js';
import { CONTENT_OVER, encodeHistory, type HistoryBytes } from './wire-request.js';

/** Degradation level (contract.md §10): both memory sources usable ⇒ L0, one ⇒ L1, none ⇒ L2. */
export function degradationLevel(branches: readonly BranchOutcome[]): DegradationLevel {
  const usable = branches.filter((b) => b.name !== 'directive' && b.status === 'success').length;
  return usable === 2 ? 'L0' : usable === 1 ? 'L1' : 'L2';
}

/** Reasons for a degraded answer: each branch that did not succeed, plus the pool's reason. */
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

/** The full answer from a CPU-stage result. Times in ms, pool figures µs. */
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

export interface DegradedAnswerOptions {
  /** The request's model, resolved (its budget is computed here) */
  resolved: ResolvedModel;
  /** IBEX_CONTEXT_NONCE_BYTES. */
  nonceBytes: number;
  /** Receives this answer's cost (ms) for the measured reserve. */
  reserve: StageReserve;
  /** Whether the answer may keep memories (CPU stage lost), reading at most {@link DEGRADED_MEMORY_TEXT_BYTES}. */
  keepMemories?: boolean;
}

/**
 * The degraded answer (contract.md §10): directive + history on the main thread, the history spliced as
 * bytes and charged its byte lengths (never below what the CPU stage would count; docs/design/main-thread.md),
 * with memories that fit when `keepMemories`.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a history content over 32,768 code points;
 *   `IBEX_ERR_DEADLINE_EXCEEDED` when the history's bytes went with a CPU task that never came back.
 */
export function degradedAnswer(a: Assembly, opts: DegradedAnswerOptions): AssembleContextResponse {
  const { req, ctx, retrieval } = a;
  const start = monotonicNow();
  const h = req.history;
  if (historyLost(h)) throw Errors.deadlineExceeded();
  const kind = opts.resolved.policy.estimate_kind;
  const bounded = isBpeKind(kind);
  const prepared = measuredHistory(h, boundHistory);
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
  const parts = { directive, memories: [] as SplicedMemory[], toolSchemas: [], nonce: a.nonce };
  const selection =
    opts.keepMemories && a.kept.length > 0 && budget.usable_budget > 0
      ? withMemories(a, h, prepared, budget, parts)
      : null;
  const formatted = selection?.formatted ?? formatAssembly(h, prepared, kind, parts);
  const step = selection && selection.memories.length > 0 ? selection : null;
  response[MEMORY_ROWS] = encodeDegradedRows(a.kept, a.filtered, step ?? undefined);
  response[ASSEMBLED_UTF8] = formatted.text;
  response.tokens_used = formatted.tokens_used;
  response.memories_included = step?.memories.length ?? 0;
  response.memory_tokens = step?.memoryTokens ?? 0;
  response.metrics.candidates_evaluated = a.kept.length;
  const end = monotonicNow();
  opts.reserve.recordDegraded(end - start, a.historyBytes);
  response.metrics.total_ms = roundMs(end - ctx.arrival);
  return response;
}

type FormattedAssembly = ReturnType<typeof formatAssembly>;

/** Most `tokens_used` a degraded answer with memories may reach: its fixed parts plus `usable_budget`. */
export function degradedTokenLimit(budget: TokenBudget): number {
  return fixedPartsTokens(budget) + budget.usable_budget;
}

/** The kept memories and the answer formatted with them; null `formatted` when none fits. */
function withMemories(
  a: Assembly,
  h: HistoryBytes,
  prepared: PreparedHistory,
  budget: TokenBudget,
  parts: AssemblyParts,
): DegradedSelection & { formatted: FormattedAssembly | null } {
  const kind = budget.estimate_kind;
  const limit = degradedTokenLimit(budget);
  const base = isBpeKind(kind) ? formatAssembly(h, prepared, kind, parts) : null;
  const selection = selectDegradedMemories(a.kept, {
    kind,
    nonceChars: a.nonce.length,
    usable: budget.usable_budget,
    bound: base ? { baseBytes: base.text.byteLength, limit } : undefined,
  });
  const formatted: FormattedAssembly | null = base;
  while (selection.memories.length > 0) {
    const f = formatAssembly(h, prepared, kind, { ...parts, memories: selection.memories });
    if (f.tokens_used <= limit) return { ...selection, formatted: f };
    dropLastMemory(selection);
  }
  return { ...selection, formatted };
}

const WARM_ROW = { memory_id: 'warm', category: 'fact', score: 0.5, similarity: 0.5, confidence: 1, rank: 1 };
const WARM_CANDIDATES = [
  { memory_id: 'warm-1', category: 'fact', content: 'likes <b>tea</b> & 😀 漢' },
  {
    memory_id: 'warm-2',
    category: 'preference',
    content: Buffer.from('prefers "short" <i>answers</i> & 漢'),
  },
];

/** Warms the degraded answer's path so the first late CPU stage does not pay cold code inside its D. */
export function warmDegradedAnswer(resolved: ResolvedModel, rounds = 20): void {
  const h = encodeHistory([
    { role: 'user', content: 'hello 😀 漢' },
    { role: ' assistant ', content: 'hi' },
  ]);
  const kind = resolved.policy.estimate_kind;
  for (let i = 0; i < rounds; i++) {
    const prepared = measuredHistory(h, boundHistory);
    if (!prepared) return;
    const history = prepared.measure ?? prepared.messages;
    const budget = calculateBudget({
      model: resolved,
      directive: 'Be brief.',
      recentMessages: history,
      toolSchemas: [],
      nonceBytes: 16,
      counted:
        isBpeKind(kind) && prepared.measure
          ? { directive: bpeTokenBound(9), messages: historyTokenBound(h, prepared.measure) }
          : undefined,
    });
    const parts = { directive: 'Be brief.', memories: [], toolSchemas: [], nonce: 'warm' };
    const base = formatAssembly(h, prepared, kind, parts);
    const selection = selectDegradedMemories(WARM_CANDIDATES, {
      kind,
      nonceChars: 4,
      usable: budget.usable_budget,
      bound: { baseBytes: base.text.byteLength, limit: degradedTokenLimit(budget) },
    });
    formatAssembly(h, prepared, kind, { ...parts, memories: selection.memories });
    encodeDegradedRows([WARM_ROW], [WARM_ROW]);
    encodeDegradedRows([WARM_ROW, WARM_ROW], [WARM_ROW], selection);
  }
}

/** Whether the history's bytes went with a CPU task abandoned at its deadline (detached buffer, length 0). */
export function historyLost(h: HistoryBytes): boolean {
  return h.count > 0 && h.source.byteLength < h.spans[4 * h.count - 1]!;
}
