/**
 * History measured and formatted as bytes (contract.md §1 isolation rule, §5, §9, §11). Estimates
 * depend only on the code-point count L, which is additive over concatenation, so the history's tokens,
 * its §11 content limits and the assembled context's `tokens_used` all follow from per-field counts of
 * the UTF-8 bytes; contents are never decoded unless they are invalid UTF-8 (then Node's decoding, U+FFFD
 * for each invalid sequence, is what the caller meant and what the answer carries).
 */

import { escapeBody } from '../text/escape.js';
import { codePointLength } from '../text/estimate.js';
import { isUtf8Span, utf8CodePointCount, utf8Text } from '../text/utf8.js';
import { LIMITS } from '../wire/limits.js';
import { SplicedBuilder, type SplicedUtf8 } from '../wire/spliced.js';
import {
  type FormatMemory,
  framingSections,
  MEMORY_CLOSE,
  memoryOpenTag,
  orderByCategory,
} from './formatter.js';

/**
 * A memory whose content is the UTF-8 bytes `bytes[start, end)` (well-formed: the caller checks), as the
 * CPU stage holds it in its batch: escaped from the bytes into the answer, never decoded.
 */
export interface ByteMemory {
  memory_id: string;
  category: string;
  bytes: Uint8Array;
  start: number;
  end: number;
  /** Code points of the escaped content (escape.ts `escapedUtf8CodePoints`). */
  escapedCodePoints: number;
  /** As {@link FormatMemory.date}. */
  date?: string;
}

/** A memory to format as spliced UTF-8: its content as text or as bytes. */
export type SplicedMemory = FormatMemory | ByteMemory;

/**
 * History messages as UTF-8 byte spans into `source` (the shape of the server's `HistoryBytes`): message
 * i's role is `source[spans[4i], spans[4i+1])`, its content `source[spans[4i+2], spans[4i+3])`.
 */
export interface HistorySpans {
  source: Uint8Array;
  spans: Uint32Array;
  count: number;
}

/** What the budget needs of a history: its message count and the code points of its text (contract.md §5). */
export interface MeasuredHistory {
  count: number;
  /** L of the history text: `<role>: <content>` lines (raw role) joined by `\n`; 0 without messages. */
  codePoints: number;
}

/** Per-message measures of a history, from its bytes. */
export interface HistoryMeasure extends MeasuredHistory {
  /** Raw roles, decoded (≤ 64 code points each once validated). */
  roles: string[];
  /** Code points of each content. */
  contentCodePoints: Float64Array;
  /** 1 where the content is valid UTF-8 (copied as bytes), 0 where it is decoded. */
  contentValid: Uint8Array;
  /** The largest content's code points (the contract.md §11 check). */
  maxContentCodePoints: number;
}

/**
 * Measures a history from its bytes: one native validity check and one word-at-a-time count per content,
 * the roles decoded. Cost ≈ 0.35 ns per content byte.
 */
export function measureHistory(h: HistorySpans): HistoryMeasure {
  return measureSpans(h, 0);
}

/**
 * The per-message measure of {@link measureHistory} and {@link boundHistory}: a content of more than
 * `countOver` bytes is counted (code points as Node decodes it), one of at most that many is charged its
 * byte length.
 */
function measureSpans(h: HistorySpans, countOver: number): HistoryMeasure {
  const { source, spans, count } = h;
  const roles: string[] = new Array(count);
  const contentCodePoints = new Float64Array(count);
  const contentValid = new Uint8Array(count);
  let codePoints = count > 0 ? count - 1 : 0; // the `\n` between lines
  let maxContent = 0;
  for (let i = 0; i < count; i++) {
    const role = utf8Text(source, spans[4 * i]!, spans[4 * i + 1]!);
    roles[i] = role;
    const start = spans[4 * i + 2]!;
    const end = spans[4 * i + 3]!;
    const valid = isUtf8Span(source, start, end);
    const l = end - start > countOver ? utf8CodePointCount(source, start, end, valid) : end - start;
    contentValid[i] = valid ? 1 : 0;
    contentCodePoints[i] = l;
    if (l > maxContent) maxContent = l;
    codePoints += codePointLength(role) + 2 + l;
  }
  return { count, codePoints, roles, contentCodePoints, contentValid, maxContentCodePoints: maxContent };
}

/**
 * Measures a history for the main thread's degraded answer from what the wire decode already knows — each
 * field's byte span — in O(messages): every content is charged its UTF-8 byte length as its code points (an
 * upper bound: a code point takes at least one byte, and Node's decoding of an invalid sequence gives one
 * U+FFFD per sequence), so estimates made from it never undercount. What is still read per content is one
 * native validity check (`isUtf8`, whether the bytes can be spliced into the answer as they are), and only
 * for a content of more than 32,768 bytes (one whose length the wire left pending: ≤ 131,072 bytes once
 * validated) its exact code points, which the contract.md §11 limit needs; roles (≤ 256 bytes once
 * validated) are decoded.
 */
export function boundHistory(h: HistorySpans): HistoryMeasure {
  return measureSpans(h, LIMITS.contentChars);
}

/**
 * Appends the history section (contract.md §9): one line per message, `<trimmed role>: <content as given>`, joined
 * by `\n`; a message whose trimmed role and content are both empty is left out. Valid contents are spans
 * of the source bytes; invalid ones are appended decoded.
 * @returns code points appended (0 when the section is empty, see `lines`) and the number of lines.
 */
export function appendHistorySection(
  h: HistorySpans,
  m: HistoryMeasure,
  out: SplicedBuilder,
): { codePoints: number; lines: number } {
  let codePoints = 0;
  let lines = 0;
  for (let i = 0; i < h.count; i++) {
    const start = h.spans[4 * i + 2]!;
    const end = h.spans[4 * i + 3]!;
    const role = m.roles[i]!.trim();
    if (role === '' && end === start) continue;
    out.text(lines > 0 ? `\n${role}: ` : `${role}: `);
    codePoints += (lines > 0 ? 1 : 0) + codePointLength(role) + 2 + m.contentCodePoints[i]!;
    if (m.contentValid[i]) out.bytes(start, end);
    else out.text(utf8Text(h.source, start, end));
    lines++;
  }
  return { codePoints, lines };
}

/** What {@link formatSpliced} formats: the formatter's input with history as bytes. */
export interface SplicedFormatInput {
  directive: string | null;
  history: HistorySpans;
  /** The history's measure ({@link measureHistory}). */
  measure: HistoryMeasure;
  /** Already in packed order. */
  memories: readonly SplicedMemory[];
  toolSchemas: readonly string[];
  nonce: string;
}

/** The assembled context as spliced UTF-8, with its code points (for `tokens_used` under an estimate). */
export interface SplicedFormatResult {
  text: SplicedUtf8;
  codePoints: number;
  memories_included: number;
}

/**
 * Formats one assembly exactly as `formatContext` does (contract.md §9; the same sections and joins), with the
 * history copied as bytes and the code points of the result counted from its parts.
 */
export function formatSpliced(input: SplicedFormatInput): SplicedFormatResult {
  const { escapedNonce, directive, tools } = framingSections(input);
  const out = new SplicedBuilder(input.history.source);
  let codePoints = 0;
  let sections = 0;
  const section = (append: () => number) => {
    if (sections > 0) out.text('\n\n');
    codePoints += (sections > 0 ? 2 : 0) + append();
    sections++;
  };
  const text = (s: string) => () => {
    out.text(s);
    return codePointLength(s);
  };
  if (directive !== '') section(text(directive));
  // Whether the history section is empty is known only after the join is written: check first.
  if (hasHistoryLine(input.history, input.measure))
    section(() => appendHistorySection(input.history, input.measure, out).codePoints);
  if (input.memories.length > 0) section(() => appendMemorySection(input.memories, escapedNonce, out));
  if (tools !== '') section(text(tools));
  return { text: out.finish(), codePoints, memories_included: input.memories.length };
}

/**
 * Appends the memories section as `otherSections` formats it (contract.md §9: blocks in category order joined by
 * `\n`), a byte content escaped from its bytes. @returns code points appended.
 */
function appendMemorySection(memories: readonly SplicedMemory[], nonce: string, out: SplicedBuilder): number {
  let codePoints = 0;
  let first = true;
  for (const m of orderByCategory(memories)) {
    const open = first
      ? memoryOpenTag(m.memory_id, m.category, nonce, m.date)
      : `\n${memoryOpenTag(m.memory_id, m.category, nonce, m.date)}`;
    out.text(open);
    codePoints += codePointLength(open);
    if ('content' in m) {
      const body = escapeBody(m.content);
      out.text(body);
      codePoints += codePointLength(body);
    } else {
      out.escaped(m.bytes, m.start, m.end);
      codePoints += m.escapedCodePoints;
    }
    out.text(MEMORY_CLOSE);
    codePoints += MEMORY_CLOSE.length;
    first = false;
  }
  return codePoints;
}

function hasHistoryLine(h: HistorySpans, m: HistoryMeasure): boolean {
  for (let i = 0; i < h.count; i++) {
    if (h.spans[4 * i + 3]! > h.spans[4 * i + 2]! || m.roles[i]!.trim() !== '') return true;
  }
  return false;
}
