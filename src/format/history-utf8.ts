/**
 * History measured and formatted as bytes (contract.md §1, §5, §9, §11): estimates depend only on the
 * additive code-point count, so contents are never decoded unless they are invalid UTF-8.
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

/** A memory held as well-formed UTF-8 bytes: escaped from them into the answer, never decoded. */
export interface ByteMemory {
  memory_id: string;
  category: string;
  bytes: Uint8Array;
  start: number;
  end: number;
  escapedCodePoints: number;
  date?: string;
}

export type SplicedMemory = FormatMemory | ByteMemory;

/** Message i's role is `source[spans[4i], spans[4i+1])`, its content `source[spans[4i+2], spans[4i+3])`. */
export interface HistorySpans {
  source: Uint8Array;
  spans: Uint32Array;
  count: number;
}

export interface MeasuredHistory {
  count: number;
  /** Of `<role>: <content>` lines joined by `\n`. */
  codePoints: number;
}

export interface HistoryMeasure extends MeasuredHistory {
  roles: string[];
  contentCodePoints: Float64Array;
  /** 1 where the content is valid UTF-8 (copied as bytes), 0 where it is decoded. */
  contentValid: Uint8Array;
  maxContentCodePoints: number;
}

/** One native validity check and a word-at-a-time count per content; roles decoded. */
export function measureHistory(h: HistorySpans): HistoryMeasure {
  return measureSpans(h, 0);
}

/** Contents over `countOver` bytes are counted; smaller ones are charged their byte length. */
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
 * O(messages) measure for the main thread's degraded answer: each content is charged its byte length, an
 * upper bound (docs/design/main-thread.md); only contents over 32,768 bytes are counted, as §11 needs.
 */
export function boundHistory(h: HistorySpans): HistoryMeasure {
  return measureSpans(h, LIMITS.contentChars);
}

/**
 * Appends the history section as `formatHistory` writes it: valid contents as source spans, invalid ones decoded.
 * @returns code points appended and the number of lines.
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

export interface SplicedFormatInput {
  directive: string | null;
  history: HistorySpans;
  measure: HistoryMeasure;
  memories: readonly SplicedMemory[];
  toolSchemas: readonly string[];
  nonce: string;
}

export interface SplicedFormatResult {
  text: SplicedUtf8;
  codePoints: number;
  memories_included: number;
}

/** Exactly what `formatContext` formats, with history copied as bytes and code points counted from the parts. */
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
  // Whether the history section is empty is known only after the join: check first.
  if (hasHistoryLine(input.history, input.measure))
    section(() => appendHistorySection(input.history, input.measure, out).codePoints);
  if (input.memories.length > 0) section(() => appendMemorySection(input.memories, escapedNonce, out));
  if (tools !== '') section(text(tools));
  return { text: out.finish(), codePoints, memories_included: input.memories.length };
}

/** As `otherSections` formats it, byte contents escaped from their bytes. @returns code points appended. */
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
