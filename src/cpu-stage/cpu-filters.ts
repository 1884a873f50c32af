/**
 * The CPU stage's filters before packing (contract.md §7; rules in docs/scoring.md). They run in the
 * worker because the history can be megabytes and memory text never becomes a string on the event loop.
 */

import { compareCodePoints } from '../text/code-point-order.js';
import { isContentTerm } from '../text/fts-query.js';
import { relevanceTerm } from '../text/relevance-term.js';
import type { ChatMessage } from '../wire/types.js';
import type { CpuFilters } from './cpu-batch.js';

const SEPARATORS_RE = /[^\p{L}\p{N}\p{M}]+/gu;

/** NFC, lower-cased, runs of punctuation/symbols/whitespace as one space, trimmed. */
export function normaliseText(text: string): string {
  return text.normalize('NFC').toLowerCase().replace(SEPARATORS_RE, ' ').trim();
}

/** Shorter memories ("sounds good") must equal a whole message to count as a repeat. */
export const MIN_CONTAINED_WORDS = 4;
/** Longer memories count only when equal to a whole message. */
export const MAX_CONTAINED_CHARS = 2048;
/** Caps characters compared per history against inputs built to defeat the anchors. */
export const VERIFY_BUDGET_CHARS = 16 * 1024 * 1024;

const SPEAKER_LABEL_RE = /^[^:\n]{1,64}:\s*/;

function hashRange(s: string, from: number, to: number): number {
  let h = 0x811c9dc5;
  for (let i = from; i < to; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

function wordCount(s: string): number {
  if (s === '') return 0;
  let n = 1;
  for (let i = s.indexOf(' '); i >= 0; i = s.indexOf(' ', i + 1)) n++;
  return n;
}

/**
 * Longer memories are not checked: a history content is ≤ 128 KiB, and decoding megabytes in a small
 * worker heap costs more than the repeat it might find.
 */
export const REPEAT_CHECK_MAX_BYTES = 256 * 1024;

export interface Utf8Range {
  bytes: Uint8Array;
  start: number;
  end: number;
}

function wordHashes(messages: readonly string[]): Set<number> {
  const out = new Set<number>();
  for (const text of messages) {
    let start = 0;
    while (start < text.length) {
      let end = text.indexOf(' ', start);
      if (end < 0) end = text.length;
      if (end > start) out.add(hashRange(text, start, end));
      start = end + 1;
    }
  }
  return out;
}

function isAsciiWordByte(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x7a) || (b >= 0x41 && b <= 0x5a);
}

function asciiWordsAllIn(bytes: Uint8Array, from: number, end: number, words: ReadonlySet<number>): boolean {
  let any = false;
  let i = from;
  while (i < end) {
    while (i < end && !isAsciiWordByte(bytes[i]!)) i++;
    if (i === end) break;
    let h = 0x811c9dc5;
    while (i < end && isAsciiWordByte(bytes[i]!)) {
      const b = bytes[i]!;
      h = Math.imul(h ^ (b <= 0x5a && b >= 0x41 ? b + 32 : b), 0x01000193);
      i++;
    }
    if (!words.has(h >>> 0)) return false;
    any = true;
  }
  return any;
}

/**
 * False when an ASCII memory has a word no message has, so it cannot repeat the history and is never
 * decoded; non-ASCII memories return true and take the full check.
 */
function mayRepeat(m: Utf8Range, words: ReadonlySet<number>): boolean {
  const { bytes, start, end } = m;
  for (let i = start; i < end; i++) if (bytes[i]! >= 0x80) return true;
  let after = start;
  for (let i = start; i < end && i <= start + 64; i++) {
    const b = bytes[i]!;
    if (b === 0x0a) break;
    if (b === 0x3a) {
      if (i > start) after = i + 1;
      break;
    }
  }
  if (after > start) {
    for (let i = after; i < end; i++) {
      if (isAsciiWordByte(bytes[i]!)) return asciiWordsAllIn(bytes, after, end, words);
    }
  }
  return asciiWordsAllIn(bytes, start, end, words);
}

/**
 * Which memories repeat a history message (rules in docs/scoring.md). Linear in the history whatever
 * the number of memories.
 */
export function repeatsHistory(history: readonly ChatMessage[], memories: readonly string[]): boolean[] {
  return repeatsHistoryOf(history, memories.length, (k) => memories[k]!);
}

/** {@link repeatsHistory} over `count` memories; with `utf8`, ASCII memories are screened on their bytes. */
export function repeatsHistoryOf(
  history: readonly ChatMessage[],
  count: number,
  content: (k: number) => string,
  utf8?: (k: number) => Utf8Range,
): boolean[] {
  const out = new Array<boolean>(count).fill(false);
  if (history.length === 0 || count === 0) return out;
  const messages = history.map((m) => normaliseText(m.content));
  const exact = new Set(messages);
  const words = utf8 === undefined ? null : wordHashes(messages);
  const patterns = new Map<string, number[]>();
  for (let i = 0; i < count; i++) {
    if (words !== null && !mayRepeat(utf8!(i), words)) continue;
    const raw = content(i);
    const label = SPEAKER_LABEL_RE.exec(raw);
    const variants = [normaliseText(raw)];
    if (label !== null) variants.push(normaliseText(raw.slice(label[0].length)));
    for (const v of variants) {
      if (v === '') continue;
      if (exact.has(v)) {
        out[i] = true;
        break;
      }
      if (v.length <= MAX_CONTAINED_CHARS && wordCount(v) >= MIN_CONTAINED_WORDS) {
        const list = patterns.get(v);
        if (list === undefined) patterns.set(v, [i]);
        else list.push(i);
      }
    }
  }
  if (patterns.size === 0) return out;
  const anchors = new Map<number, string[]>();
  for (const p of patterns.keys()) {
    const end = p.indexOf(' ');
    const h = hashRange(p, 0, end);
    const list = anchors.get(h);
    if (list === undefined) anchors.set(h, [p]);
    else list.push(p);
  }
  const found = new Set<string>();
  let budget = VERIFY_BUDGET_CHARS;
  for (const text of messages) {
    let start = 0;
    while (start < text.length && budget > 0) {
      let end = text.indexOf(' ', start);
      if (end < 0) end = text.length;
      const list = anchors.get(hashRange(text, start, end));
      if (list !== undefined) {
        for (const p of list) {
          if (found.has(p)) continue;
          budget -= p.length;
          const after = start + p.length;
          if ((after === text.length || text.charCodeAt(after) === 32) && text.startsWith(p, start))
            found.add(p);
        }
      }
      start = end + 1;
    }
  }
  for (const p of found) for (const i of patterns.get(p)!) out[i] = true;
  return out;
}

/** A query's distinct normalised content terms (as fts-query.ts searches for them). */
export function queryTerms(query: string): Set<string> {
  const terms = new Set<string>();
  for (const t of normaliseText(query).split(' ')) if (t !== '' && isContentTerm(t)) terms.add(t);
  return terms;
}

/** Share of the query's content terms that occur as words of the content, in [0, 1]; 0 without terms. */
export function lexicalRelevance(terms: ReadonlySet<string>, content: string): number {
  if (terms.size === 0) return 0;
  let hits = 0;
  const seen = new Set<string>();
  for (const w of normaliseText(content).split(' ')) {
    if (terms.has(w) && !seen.has(w)) {
      seen.add(w);
      hits++;
      if (hits === terms.size) break;
    }
  }
  return hits / terms.size;
}

export interface FilterOutcome {
  pack: number[];
  filtered: number[];
}

export interface FilterInput {
  packCount: number;
  ids: readonly string[];
  content: (i: number) => string;
  /** Content's UTF-8 length without decoding; absent = every one is checked. */
  contentBytes?: (i: number) => number;
  contentUtf8?: (i: number) => Utf8Range;
  /** Mutated: lexical relevances add w_rel × relevance. */
  score: Float64Array;
  /** Mutated: NaN entries get their lexical relevance. */
  relevance: Float64Array;
  history: readonly ChatMessage[];
  filters: CpuFilters;
}

/** Lexical relevance and its floor, then history repeats, then `max_memories` by (score desc, id asc). */
export function cpuFilters(x: FilterInput): FilterOutcome {
  const { packCount, score, relevance, filters } = x;
  const out = new Array<boolean>(packCount).fill(false);
  let terms: Set<string> | null = null;
  for (let i = 0; i < packCount; i++) {
    if (!Number.isNaN(relevance[i]!)) continue;
    terms ??= queryTerms(filters.query);
    const r = lexicalRelevance(terms, x.content(i));
    relevance[i] = r;
    score[i] = score[i]! + filters.relevanceWeight * relevanceTerm(r, filters.relevanceExponent);
    if (r < filters.relevanceFloor) out[i] = true;
  }
  if (filters.history && x.history.length > 0) {
    const open: number[] = [];
    for (let i = 0; i < packCount; i++) {
      if (!out[i] && (x.contentBytes === undefined || x.contentBytes(i) <= REPEAT_CHECK_MAX_BYTES))
        open.push(i);
    }
    const utf8 = x.contentUtf8;
    const repeats = repeatsHistoryOf(
      x.history,
      open.length,
      (k) => x.content(open[k]!),
      utf8 === undefined ? undefined : (k) => utf8(open[k]!),
    );
    for (let k = 0; k < open.length; k++) if (repeats[k]) out[open[k]!] = true;
  }
  let left: number[] = [];
  for (let i = 0; i < packCount; i++) if (!out[i]) left.push(i);
  if (filters.maxMemories > 0 && left.length > filters.maxMemories) {
    const top = new Set(
      [...left]
        .sort((a, b) => score[b]! - score[a]! || compareCodePoints(x.ids[a]!, x.ids[b]!))
        .slice(0, filters.maxMemories),
    );
    for (const i of left) if (!top.has(i)) out[i] = true;
    left = left.filter((i) => top.has(i));
  }
  const filtered: number[] = [];
  for (let i = 0; i < packCount; i++) if (out[i]) filtered.push(i);
  return { pack: left, filtered };
}
