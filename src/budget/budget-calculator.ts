/** BudgetCalculator (contract.md §6): tokens left for memories, and each memory's wrapped-block cost. */

import { safetySentence } from '../format/formatter.js';
import type { MeasuredHistory } from '../format/history-utf8.js';
import { isBpeKind } from '../text/bpe.js';
import { escapedCodePointLength } from '../text/escape.js';
import { type EstimateKind, estimateFromLength, estimateTokens } from '../text/estimate.js';
import { nonceLength } from '../text/nonce.js';
import type { ChatMessage } from '../wire/types.js';
import { bpeFormatterOverheadTokens, bpeWrappedBlockTokens } from './bpe-cache.js';
import type { ResolvedModel } from './catalog.js';

/** Budget below this many tokens is `is_constrained`. */
export const CONSTRAINED_BELOW = 256;

/** TokenBudget of contract.md §6; every count in tokens of `estimate_kind`. */
export interface TokenBudget {
  context_window: number;
  response_reserve: number;
  safety_buffer: number;
  usable_budget: number;
  directive_tokens: number;
  messages_tokens: number;
  tool_schemas_tokens: number;
  formatter_overhead_tokens: number;
  is_constrained: boolean;
  estimate_kind: EstimateKind;
}

export interface BudgetInput {
  model: ResolvedModel;
  directive: string | null;
  /** History as messages, or measured from its bytes (estimate kinds only: a BPE count needs the text). */
  recentMessages: readonly ChatMessage[] | MeasuredHistory;
  toolSchemas: readonly string[];
  nonceBytes: number;
  /** Request's available_tokens; used only when 0 < available_tokens < usable_budget. */
  availableTokens?: number;
  /** Directive and history tokens counted elsewhere (upper bounds allowed, as in the degraded answer). */
  counted?: { directive: number; messages: number };
}

/** Tokens of an answer's fixed parts: directive, history, tool schemas and formatter overhead (contract.md §6). */
export function fixedPartsTokens(budget: TokenBudget): number {
  return (
    budget.directive_tokens +
    budget.messages_tokens +
    budget.tool_schemas_tokens +
    budget.formatter_overhead_tokens
  );
}

/** response_reserve = max(500, min(trunc(0.15 × window), max_output, 4096)) tokens. */
export function responseReserve(contextWindow: number, maxOutputTokens: number): number {
  return Math.max(500, Math.min(Math.trunc(0.15 * contextWindow), maxOutputTokens, 4096));
}

/** History text: `<role>: <content>` lines with raw role and content, joined by `\n` (contract.md §5). */
export function historyText(messages: readonly ChatMessage[]): string {
  return messages.map((m) => `${m.role}: ${m.content}`).join('\n');
}

function isMeasured(h: readonly ChatMessage[] | MeasuredHistory): h is MeasuredHistory {
  return !Array.isArray(h);
}

/** Computes the TokenBudget (contract.md §6). @throws TypeError for a measured history under `bpe_*`. */
export function calculateBudget(input: BudgetInput): TokenBudget {
  const { model, policy } = input.model;
  const kind = policy.estimate_kind;
  const window = model.context_window;
  const reserve = responseReserve(window, model.max_output_tokens);
  const safety = Math.trunc(window * policy.safety_buffer_fraction);
  const directive = input.directive ?? '';
  const directiveTokens = input.counted ? input.counted.directive : estimateTokens(directive, kind);
  const history = input.recentMessages;
  const messageCount = isMeasured(history) ? history.count : history.length;
  let messagesTokens = 0;
  if (input.counted) messagesTokens = input.counted.messages;
  else if (messageCount > 0) {
    messagesTokens = isMeasured(history)
      ? estimateFromLength(history.codePoints, kind)
      : estimateTokens(historyText(history), kind);
  }
  const tools = input.toolSchemas.filter((s) => s.trim() !== '');
  const toolTokens = estimateTokens(tools.join('\n'), kind);

  const hasDirective = directive.trim() !== '';
  const sections = (hasDirective ? 1 : 0) + (messageCount > 0 ? 1 : 0) + 1 + (tools.length > 0 ? 1 : 0);
  let overheadText = '';
  if (hasDirective) overheadText += `\n${safetySentence('n'.repeat(nonceLength(input.nonceBytes)))}`;
  overheadText += '\n\n'.repeat(Math.min(3, Math.max(0, sections - 1)));
  const joins = Math.min(3, Math.max(0, sections - 1));
  const overheadTokens = isBpeKind(kind)
    ? bpeFormatterOverheadTokens(hasDirective, nonceLength(input.nonceBytes), joins, kind)
    : estimateTokens(overheadText, kind);

  let usable = Math.max(
    0,
    window - reserve - safety - directiveTokens - messagesTokens - toolTokens - overheadTokens,
  );
  const available = input.availableTokens ?? 0;
  if (available > 0 && available < usable) usable = available;
  return {
    context_window: window,
    response_reserve: reserve,
    safety_buffer: safety,
    usable_budget: usable,
    directive_tokens: directiveTokens,
    messages_tokens: messagesTokens,
    tool_schemas_tokens: toolTokens,
    formatter_overhead_tokens: overheadTokens,
    is_constrained: usable < CONSTRAINED_BELOW,
    estimate_kind: kind,
  };
}

const OPEN_PREFIX = '<ibex_memory nonce="'.length;
const OPEN_ID = '" id="'.length;
const OPEN_CATEGORY = '" category="'.length;
// `">` + `\n` after the open tag, `\n` + `</ibex_memory>` after the body, and the `\n` joining blocks.
const BLOCK_FIXED = OPEN_PREFIX + OPEN_ID + OPEN_CATEGORY + 2 + 1 + 1 + '</ibex_memory>'.length + 1;

/** Tokens of one memory's wrapped block plus its `\n` joiner (contract.md §6); estimates are subadditive. */
export function wrappedBlockTokens(
  memory: { memory_id: string; category: string; content: string; date?: string },
  nonceChars: number,
  kind: EstimateKind,
  nonce?: string,
): number {
  if (isBpeKind(kind)) return bpeWrappedBlockTokens(memory, kind, nonce, nonceChars);
  const length = wrappedBlockLength(
    escapedCodePointLength(memory.memory_id, true),
    escapedCodePointLength(memory.category, true),
    escapedCodePointLength(memory.content),
    nonceChars,
    dateAttributeLength(memory.date),
  );
  return estimateFromLength(length, kind);
}

/** Code points of one wrapped block plus joiner, from its parts' escaped lengths (estimate kinds only). */
export function wrappedBlockLength(
  escapedId: number,
  escapedCategory: number,
  escapedContent: number,
  nonceChars: number,
  dateAttribute = 0,
): number {
  return BLOCK_FIXED + nonceChars + escapedId + escapedCategory + escapedContent + dateAttribute;
}

/** Code points of a memory's ` date="…"` attribute (formatter.ts `dateAttribute`); 0 without a date. */
export function dateAttributeLength(date: string | undefined): number {
  return date === undefined ? 0 : ' date="'.length + escapedCodePointLength(date, true) + 1;
}
