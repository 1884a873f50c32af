/**
 * The assembled context from history bytes, shared by the CPU stage and the L2 degraded answer: estimate
 * kinds measure and copy bytes; BPE kinds need the text and decode it (contract.md §5).
 */
import { isBpeKind } from '../text/bpe.js';
import { bpeTokenBound } from '../text/bpe-bound.js';
import { codePointLength, type EstimateKind, estimateFromLength, estimateTokens } from '../text/estimate.js';
import { utf8Text } from '../text/utf8.js';
import { LIMITS } from '../wire/limits.js';
import { SplicedBuilder, type SplicedUtf8 } from '../wire/spliced.js';
import type { ChatMessage } from '../wire/types.js';
import { type FormatMemory, formatContext } from './formatter.js';
import {
  formatSpliced,
  type HistoryMeasure,
  type HistorySpans,
  measureHistory,
  type SplicedMemory,
} from './history-utf8.js';

export type PreparedHistory =
  | { measure: HistoryMeasure; messages: null }
  | { measure: null; messages: ChatMessage[] };

export function decodeSpans(h: HistorySpans): ChatMessage[] {
  const out: ChatMessage[] = new Array(h.count);
  for (let k = 0; k < h.count; k++) {
    out[k] = {
      role: utf8Text(h.source, h.spans[4 * k]!, h.spans[4 * k + 1]!),
      content: utf8Text(h.source, h.spans[4 * k + 2]!, h.spans[4 * k + 3]!),
    };
  }
  return out;
}

/**
 * Measures or decodes a history and decides its content limits (contract.md §11).
 * @returns null when some content exceeds 32,768 code points.
 */
export function prepareHistory(
  h: HistorySpans,
  kind: EstimateKind,
  contentPending: boolean,
): PreparedHistory | null {
  if (!isBpeKind(kind)) return measuredHistory(h);
  const messages = decodeSpans(h);
  if (contentPending) {
    for (const m of messages) {
      if (m.content.length > LIMITS.contentChars && codePointLength(m.content) > LIMITS.contentChars)
        return null;
    }
  }
  return { measure: null, messages };
}

/**
 * Measures a history from its bytes under any kind, with {@link measureHistory} or, for the main thread,
 * {@link boundHistory}. @returns null when some content exceeds 32,768 code points.
 */
export function measuredHistory(
  h: HistorySpans,
  measure: (h: HistorySpans) => HistoryMeasure = measureHistory,
): PreparedHistory | null {
  const m = measure(h);
  return m.maxContentCodePoints > LIMITS.contentChars ? null : { measure: m, messages: null };
}

export interface AssemblyParts {
  directive: string | null;
  memories: readonly SplicedMemory[];
  toolSchemas: readonly string[];
  nonce: string;
}

export function memoryText(m: SplicedMemory): FormatMemory {
  return 'content' in m
    ? m
    : {
        memory_id: m.memory_id,
        category: m.category,
        content: utf8Text(m.bytes, m.start, m.end),
        date: m.date,
      };
}

/**
 * Formats the context (contract.md §9) as spliced UTF-8 with `tokens_used`: a bound for a measured history
 * under BPE; else `accountedTokens` when given (the CPU stage's under BPE: the budget's sum of the answer's
 * parts, an upper bound of the count), else the count of the whole text.
 */
export function formatAssembly(
  h: HistorySpans,
  prepared: PreparedHistory,
  kind: EstimateKind,
  parts: AssemblyParts,
  accountedTokens?: number,
): { text: SplicedUtf8; tokens_used: number } {
  if (prepared.measure) {
    const f = formatSpliced({ ...parts, history: h, measure: prepared.measure });
    const tokens_used = isBpeKind(kind)
      ? bpeTokenBound(f.text.byteLength)
      : estimateFromLength(f.codePoints, kind);
    return { text: f.text, tokens_used };
  }
  const context = formatContext({
    ...parts,
    memories: parts.memories.map(memoryText),
    recentMessages: prepared.messages,
  }).assembled_context;
  const out = new SplicedBuilder(h.source);
  out.text(context);
  return { text: out.finish(), tokens_used: accountedTokens ?? estimateTokens(context, kind) };
}
