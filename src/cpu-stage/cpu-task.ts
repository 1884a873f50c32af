/** The CPU stage of one assembly as one task on transferred bytes; pure, runs inline and in a pool worker. */
import { threadId } from 'node:worker_threads';
import {
  calculateBudget,
  dateAttributeLength,
  fixedPartsTokens,
  type TokenBudget,
  wrappedBlockLength,
  wrappedBlockTokens,
} from '../budget/budget-calculator.js';
import {
  decodeSpans,
  formatAssembly,
  memoryText,
  type PreparedHistory,
  prepareHistory,
} from '../format/assembly-text.js';
import { formatContext } from '../format/formatter.js';
import type { HistorySpans, SplicedMemory } from '../format/history-utf8.js';
import { encodeMemoryRows } from '../format/memory-rows.js';
import { pack } from '../pack/packer.js';
import { isBpeKind } from '../text/bpe.js';
import { escapedCodePointLength, escapedUtf8CodePoints } from '../text/escape.js';
import { estimateFromLength } from '../text/estimate.js';
import { nonceLength } from '../text/nonce.js';
import { isUtf8Span } from '../text/utf8.js';
import { monotonicNow } from '../util/clock.js';
import { LIMITS } from '../wire/limits.js';
import type { ChatMessage } from '../wire/types.js';
import { type CpuCandidate, type CpuTaskInput, type CpuTaskOutput, validateTaskInput } from './cpu-batch.js';
import { encodeCandidates } from './cpu-batch-encode.js';
import { cpuFilters } from './cpu-filters.js';
import { calibrateFormatCost, deadlineReserveMs, formatUnits } from './format-cost.js';

export * from './cpu-batch.js';
export { deadlineReserveMs } from './format-cost.js';

/** The history messages of a task: decoded from its bytes, or the cloned strings. */
export function historyOf(input: CpuTaskInput): ChatMessage[] {
  return (input.historyCount ?? 0) === 0 ? input.recentMessages : decodeSpans(spansOf(input));
}

const CONTENT_OVER = `message.content exceeds ${LIMITS.contentChars} characters`;

function invalidOutput(message: string, n: number, startedAt: number): CpuTaskOutput {
  const empty = new Int32Array(0);
  return {
    invalid: message,
    budget: null,
    costs: new Int32Array(n),
    tokens_used: null,
    selected: empty,
    excluded: new Int32Array(0),
    filtered: new Int32Array(0),
    assembled_context: '',
    assembled_utf8: null,
    memories_included: 0,
    memory_rows: new Uint8Array(0),
    pack: {
      path: 'dp',
      greedy_reason: null,
      total_tokens: 0,
      total_score: 0,
      skipped_count: 0,
      was_budget_reached: false,
      candidates_evaluated: 0,
      cells: 0,
      source: 'trivial',
    },
    budget_us: 0,
    pack_us: 0,
    format_us: 0,
    run_us: (monotonicNow() - startedAt) * 1000,
    started_at: startedAt,
    thread_id: threadId,
  };
}

const MAX_DATE_MS = 8.64e15;

/** ISO dates (UTC); undefined when unknown. */
function memoryDates(createdAt: Float64Array): (string | undefined)[] {
  const out = new Array<string | undefined>(createdAt.length);
  for (let i = 0; i < createdAt.length; i++) {
    const ms = createdAt[i]!;
    out[i] =
      Number.isFinite(ms) && Math.abs(ms) <= MAX_DATE_MS
        ? new Date(ms).toISOString().split('T')[0]
        : undefined;
  }
  return out;
}

function spansOf(input: CpuTaskInput): HistorySpans {
  return { source: input.history, spans: input.historySpans, count: input.historyCount ?? 0 };
}

/** Measured from bytes when the task computes the budget; null: a content over its limit. */
function taskHistory(input: CpuTaskInput): PreparedHistory | null {
  const kind = input.budgetModel?.policy.estimate_kind;
  if (kind !== undefined) return prepareHistory(spansOf(input), kind, input.historyContentPending ?? false);
  return { measure: null, messages: historyOf(input) };
}

/**
 * The CPU stage of one assembly (contract.md §6, §8–§11): history checks, budget and block costs (with
 * `budgetModel`), filters, pack under `deadline − deadlineReserveMs(…)`, format, `tokens_used`.
 * @returns `invalid` set (nothing packed) for a history content over its limit.
 * @throws TypeError for a malformed or detached batch; IbexError `IBEX_ERR_BUDGET_EXCEEDED` on a packer
 *   invariant breach.
 */
export function runCpuTask(input: CpuTaskInput): CpuTaskOutput {
  const startedAt = monotonicNow();
  validateTaskInput(input);
  const n = input.score.length;
  const o = input.offsets;
  const text = input.text;
  const bytes = Buffer.from(text.buffer, text.byteOffset, text.byteLength);
  const tb = performance.now();
  const history = taskHistory(input);
  if (history === null) return invalidOutput(CONTENT_OVER, n, startedAt);
  const ids: string[] = new Array(n);
  const categories: string[] = new Array(n);
  const units = new Float64Array(n);
  let totalUnits = 0;
  for (let i = 0; i < n; i++) {
    ids[i] = bytes.toString('utf8', o[3 * i], o[3 * i + 1]);
    categories[i] = bytes.toString('utf8', o[3 * i + 1], o[3 * i + 2]);
    units[i] = formatUnits(text, o[3 * i + 2]!, o[3 * i + 3]!);
    totalUnits += units[i]!;
  }
  const content = (i: number) => bytes.toString('utf8', o[3 * i + 2], o[3 * i + 3]);
  const dates = input.memoryDates ? memoryDates(input.createdAt) : null;
  let budget: TokenBudget | null = null;
  const costs = new Int32Array(n);
  // null = not measured from bytes.
  let escapedContent: Float64Array | null = null;
  if (input.budgetModel) {
    budget = calculateBudget({
      model: input.budgetModel,
      directive: input.directive,
      recentMessages: history.measure ?? history.messages,
      toolSchemas: input.toolSchemas,
      nonceBytes: input.nonceBytes ?? 16,
      availableTokens: input.availableTokens ?? 0,
    });
    const nonceChars = nonceLength(input.nonceBytes ?? 16);
    const kind = budget.estimate_kind;
    if (isBpeKind(kind)) {
      for (let i = 0; i < n; i++) {
        costs[i] = wrappedBlockTokens(
          { memory_id: ids[i]!, category: categories[i]!, content: content(i), date: dates?.[i] },
          nonceChars,
          kind,
          input.nonce,
        );
      }
    } else {
      // Why measured from bytes: see docs/design/packing.md.
      escapedContent = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        escapedContent[i] = escapedUtf8CodePoints(bytes, o[3 * i + 2]!, o[3 * i + 3]!);
        const length = wrappedBlockLength(
          escapedCodePointLength(ids[i]!, true),
          escapedCodePointLength(categories[i]!, true),
          escapedContent[i]!,
          nonceChars,
          dateAttributeLength(dates?.[i]),
        );
        costs[i] = estimateFromLength(length, kind);
      }
    }
  } else {
    costs.set(input.tokens);
  }
  const packCount = Math.min(n, input.packCount ?? n);
  // Packer indices map back to the input through `kept`.
  let kept: number[] | null = null;
  let filtered = new Int32Array(0);
  if (input.filters !== undefined && packCount > 0) {
    const f = cpuFilters({
      packCount,
      ids,
      content,
      contentBytes: (i: number) => o[3 * i + 3]! - o[3 * i + 2]!,
      contentUtf8: (i: number) => ({ bytes: text, start: o[3 * i + 2]!, end: o[3 * i + 3]! }),
      score: input.score,
      relevance: input.relevance,
      history: input.filters.history ? (history.messages ?? historyOf(input)) : [],
      filters: input.filters,
    });
    if (f.filtered.length > 0) {
      kept = f.pack;
      filtered = Int32Array.from(f.filtered);
    }
  }
  let packUnits = 0;
  if (kept === null) for (let i = 0; i < packCount; i++) packUnits += units[i]!;
  else for (const i of kept) packUnits += units[i]!;
  const t1 = performance.now();
  const r = pack({
    ids: kept !== null ? kept.map((i) => ids[i]!) : packCount === n ? ids : ids.slice(0, packCount),
    scores:
      kept !== null ? Float64Array.from(kept, (i) => input.score[i]!) : input.score.subarray(0, packCount),
    tokens: kept !== null ? Int32Array.from(kept, (i) => costs[i]!) : costs.subarray(0, packCount),
    budget: budget ? budget.usable_budget : input.budget,
    dpCellCeiling: input.dpCellCeiling,
    maxConsecutiveSkips: input.maxConsecutiveSkips,
    deadline: input.deadline - deadlineReserveMs(packCount === n && kept === null ? totalUnits : packUnits),
  });
  if (kept !== null) {
    const map = kept;
    r.selected = Int32Array.from(r.selected, (k) => map[k]!);
    r.excluded = Int32Array.from(r.excluded, (k) => map[k]!);
  }
  const t2 = performance.now();
  const memories: SplicedMemory[] = new Array(r.selected.length);
  let selectedUnits = 0;
  for (let k = 0; k < r.selected.length; k++) {
    const i = r.selected[k]!;
    selectedUnits += units[i]!;
    const start = o[3 * i + 2]!;
    const end = o[3 * i + 3]!;
    // Estimate kinds escape from bytes, never decoded; BPE kinds count tokens on the text.
    memories[k] =
      escapedContent !== null && isUtf8Span(text, start, end)
        ? {
            memory_id: ids[i]!,
            category: categories[i]!,
            bytes: text,
            start,
            end,
            escapedCodePoints: escapedContent[i]!,
            date: dates?.[i],
          }
        : { memory_id: ids[i]!, category: categories[i]!, content: content(i), date: dates?.[i] };
  }
  // Under BPE, counting the whole formatted context again cost most of the tokenizer's time on large
  // answers; the budget's own sum of the parts (exact block costs, fixed parts, join allowances) bounds it.
  const accounted =
    budget && isBpeKind(budget.estimate_kind) ? fixedPartsTokens(budget) + r.total_tokens : undefined;
  const formatted = formatTask(input, budget, history, memories, accounted);
  const t3 = performance.now();
  calibrateFormatCost(selectedUnits, t3 - t2);
  return {
    invalid: null,
    budget,
    costs,
    tokens_used: formatted.tokens_used,
    selected: r.selected,
    excluded: r.excluded,
    filtered,
    assembled_context: formatted.assembled_context,
    assembled_utf8: formatted.assembled_utf8,
    memories_included: memories.length,
    memory_rows: encodeMemoryRows(input, {
      selected: r.selected,
      excluded: r.excluded,
      filtered,
      packCount,
      costs,
    }),
    pack: {
      path: r.path,
      greedy_reason: r.greedy_reason,
      total_tokens: r.total_tokens,
      total_score: r.total_score,
      skipped_count: r.skipped_count,
      was_budget_reached: r.was_budget_reached,
      candidates_evaluated: r.candidates_evaluated,
      cells: r.cells,
      source: r.source,
    },
    budget_us: (t1 - tb) * 1000,
    pack_us: (t2 - t1) * 1000,
    format_us: (t3 - t2) * 1000,
    run_us: (monotonicNow() - startedAt) * 1000,
    started_at: startedAt,
    thread_id: threadId,
  };
}

function formatTask(
  input: CpuTaskInput,
  budget: TokenBudget | null,
  history: PreparedHistory,
  memories: SplicedMemory[],
  accountedTokens?: number,
): Pick<CpuTaskOutput, 'assembled_context' | 'assembled_utf8' | 'tokens_used'> {
  const parts = { directive: input.directive, memories, toolSchemas: input.toolSchemas, nonce: input.nonce };
  if (budget) {
    const f = formatAssembly(spansOf(input), history, budget.estimate_kind, parts, accountedTokens);
    // Stays spliced: the main thread writes its spans as they are (gathered-send.ts).
    return { assembled_context: '', assembled_utf8: f.text, tokens_used: f.tokens_used };
  }
  const context = formatContext({
    ...parts,
    memories: memories.map(memoryText),
    recentMessages: history.messages ?? [],
  }).assembled_context;
  return {
    assembled_context: context,
    assembled_utf8: null,
    tokens_used: null,
  };
}

const WARM_CATEGORIES = ['procedural', 'factual', 'preference', 'behavioral', 'episodic', 'notes'];

/** A deterministic warm-up batch; markup included so the escaper's slow path is exercised. */
export function warmupInput(n: number, chars: number, budget: number, dpCellCeiling = 437_570): CpuTaskInput {
  const candidates: CpuCandidate[] = [];
  for (let i = 0; i < n; i++) {
    const body = `warm-up memory ${i} <b>&amp; "quoted" text</b> `.repeat(Math.max(1, Math.ceil(chars / 40)));
    const content = body.slice(0, chars + (i % 7) * 3);
    candidates.push({
      memory_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      category: WARM_CATEGORIES[i % WARM_CATEGORIES.length]!,
      content,
      score: ((i * 7919) % 1000) / 1000,
      similarity: ((i * 104729) % 1000) / 1000,
      confidence: 0.5,
      rank: i + 1,
      tokens: Math.ceil(content.length / 4) + 40,
    });
  }
  return encodeCandidates(candidates, {
    budget,
    dpCellCeiling,
    maxConsecutiveSkips: 5,
    nonce: 'warm-up-nonce',
    directive: 'Be helpful.',
    recentMessages: [{ role: 'user', content: 'hello' }],
    toolSchemas: [],
    deadline: monotonicNow() + 60_000,
  });
}

/** JIT-warms this thread's packer and formatter and seeds the format-cost estimate; once per worker. */
export function warmCpuTask(rounds = 40): void {
  for (let r = 0; r < rounds; r++) {
    runCpuTask(warmupInput(30, 400, 2400)); // DP, bucket refinement, swaps
    runCpuTask(warmupInput(30, 400, 120_000)); // all fit
    if (r % 8 === 0) runCpuTask(warmupInput(200, 300, 100_000, 100)); // greedy (ceiling), ~60 KB formatted
  }
}
