/**
 * The assembled context of one assembly from history bytes (contract.md §1, §5, §9, §11), shared
 * by the CPU stage and the L2 degraded answer: under an estimate kind the history is measured and copied
 * as bytes and `tokens_used` follows from the parts' code points; a BPE kind (contract.md §5: exact counts need
 * the text) decodes it.
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

/** History ready for the budget and the formatter: measured (estimate kinds) or decoded (BPE kinds). */
export type PreparedHistory =
  | { measure: HistoryMeasure; messages: null }
  | { measure: null; messages: ChatMessage[] };

/** The messages of `h` decoded (raw role and content). */
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
 * Measures (estimate kind) or decodes (BPE kind) a history and decides its content limits (contract.md §11).
 * @param contentPending whether some content's length was left undecided by the wire (BPE path only: the
 *   measure counts every content anyway).
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
 * Measures a history from its bytes without decoding it, under any kind (a BPE kind's answer then counts
 * bounds, see {@link formatAssembly}), and decides its content limits (contract.md §11).
 * @param measure how: {@link measureHistory} (code points counted) or, for the main thread's degraded
 *   answer, {@link boundHistory} (O(messages): byte lengths as code points, an upper bound).
 * @returns null when some content exceeds 32,768 code points.
 */
export function measuredHistory(
  h: HistorySpans,
  measure: (h: HistorySpans) => HistoryMeasure = measureHistory,
): PreparedHistory | null {
  const m = measure(h);
  return m.maxContentCodePoints > LIMITS.contentChars ? null : { measure: m, messages: null };
}

/** What {@link formatAssembly} formats besides the history. */
export interface AssemblyParts {
  directive: string | null;
  /** Already in packed order; byte contents are decoded on the BPE path. */
  memories: readonly SplicedMemory[];
  toolSchemas: readonly string[];
  nonce: string;
}

/** `m` with its content as text (a byte content decoded). */
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
 * Formats the assembled context (contract.md §9) as spliced UTF-8 and counts its tokens under `kind`: a
 * measured history under a BPE kind gets {@link bpeTokenBound} of the text's bytes (≥ the exact count).
 * @param h the history's bytes; spans of `h.source` end up in the result when it was measured.
 */
export function formatAssembly(
  h: HistorySpans,
  prepared: PreparedHistory,
  kind: EstimateKind,
  parts: AssemblyParts,
): { text: SplicedUtf8; tokens_used: number } {
  if (prepared.measure) {
    const f = formatSpliced({ ...parts, history: h, measure: prepared.measure });
    // A measured history under a BPE kind (the main thread's degraded answer): a bound, not a count.
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
  return { text: out.finish(), tokens_used: estimateTokens(context, kind) };
}
