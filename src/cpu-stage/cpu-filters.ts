/**
 * The CPU stage's filters before packing (contract.md §7): memories already in the history, a lexical
 * relevance for the candidates the ranking could not measure (a memory service's hot hits), and the
 * `max_memories` cut after both. Here, not on the main thread: the history can be megabytes and memory
 * text never becomes a string on the event loop (contract.md §1).
 *
 * Pure: runs in the pool worker (and inline).
 */

import { compareCodePoints } from '../text/code-point-order.js';
import { isContentTerm } from '../text/fts-query.js';
import { relevanceTerm } from '../text/relevance-term.js';
import type { ChatMessage } from '../wire/types.js';
import type { CpuFilters } from './cpu-batch.js';

/** Runs of anything but letters, digits and combining marks: punctuation, symbols, whitespace. */
const SEPARATORS_RE = /[^\p{L}\p{N}\p{M}]+/gu;

/**
 * Text as repeats are compared: Unicode NFC, lower-cased, every run of punctuation, symbols and
 * whitespace one space, trimmed. `"Hello,  World!"` → `"hello world"`.
 */
export function normaliseText(text: string): string {
  return text.normalize('NFC').toLowerCase().replace(SEPARATORS_RE, ' ').trim();
}

/**
 * A normalised memory counts as contained in a longer message only from this many words: "thanks" or
 * "sounds good" inside a message repeats nothing worth a memory slot; shorter memories must equal a
 * whole message.
 */
export const MIN_CONTAINED_WORDS = 4;
/**
 * Normalised memories up to this many characters are looked for inside messages; a longer one counts
 * only when it equals a whole message (a hash-set look-up). Chat-turn memories are far shorter.
 */
export const MAX_CONTAINED_CHARS = 2048;
/**
 * Most characters compared while confirming anchor matches over one history: bounds the adversarial
 * case (a history and many memories of one repeated word); past it, remaining memories stay in.
 */
export const VERIFY_BUDGET_CHARS = 16 * 1024 * 1024;

/** A leading speaker label of a memory (`Caroline: …`): a name of at most 64 characters without a colon. */
const SPEAKER_LABEL_RE = /^[^:\n]{1,64}:\s*/;

/** FNV-1a of `s`'s UTF-16 units [from, to). */
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
 * Memories longer than this (UTF-8 bytes) are not checked against the history: a history content holds at
 * most 32,768 code points (≤ 128 KiB), so only a memory made mostly of collapsible punctuation could
 * still equal one, and decoding and normalising memories of megabytes in a worker with a small heap
 * costs more than a repeat it might find.
 */
export const REPEAT_CHECK_MAX_BYTES = 256 * 1024;

/** A memory's UTF-8 bytes: `bytes[start, end)`. */
export interface Utf8Range {
  bytes: Uint8Array;
  start: number;
  end: number;
}

/** FNV-1a hashes of every word of the normalised messages (the words {@link hashRange} anchors on). */
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

/** ASCII letter or digit: the ASCII part of `\p{L}\p{N}\p{M}` (everything else ASCII is a separator). */
function isAsciiWordByte(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x7a) || (b >= 0x41 && b <= 0x5a);
}

/**
 * Whether every word of an ASCII `bytes[from, end)` is among `words` (hashed as {@link hashRange} hashes
 * the normalised word: lower-cased), and it has one at least. Without allocating.
 */
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
 * Whether a memory may repeat the history, decided from its bytes when it is ASCII (else true: the full
 * check decides). A repeat equals a message or occurs in one on word boundaries, after the speaker label
 * or not, so every word of the text after the label (of the whole text, when nothing follows the label)
 * is a word of some message. Most memories fail that on their first words, and are then neither decoded
 * nor normalised: that check cost about 2 ms of a call with 600 candidates.
 */
function mayRepeat(m: Utf8Range, words: ReadonlySet<number>): boolean {
  const { bytes, start, end } = m;
  for (let i = start; i < end; i++) if (bytes[i]! >= 0x80) return true;
  // SPEAKER_LABEL_RE on ASCII: 1..64 bytes without `:` or `\n`, then `:`.
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
 * Which memories repeat a history message: the memory's normalised text (or the text after a leading
 * speaker label) equals a message's normalised content, or, when it has {@link MIN_CONTAINED_WORDS} to
 * {@link MAX_CONTAINED_CHARS}, occurs in it on word boundaries. Equality is a hash-set look-up;
 * containment is one pass over the history's words, anchored on each pattern's first word and
 * confirmed with `startsWith`: linear in the history, whatever the number of memories.
 * @returns for each memory, whether it repeats the history.
 */
export function repeatsHistory(history: readonly ChatMessage[], memories: readonly string[]): boolean[] {
  return repeatsHistoryOf(history, memories.length, (k) => memories[k]!);
}

/**
 * {@link repeatsHistory} over `count` memories read through `content`. With `utf8` (a memory's bytes), an
 * ASCII memory with a word no message has is decided from its bytes ({@link mayRepeat}), never decoded.
 */
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
  // Patterns to look for inside messages, each with the memories it stands for.
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

/** The distinct content terms of a query (as the stores search for them: fts-query.ts), normalised. */
export function queryTerms(query: string): Set<string> {
  const terms = new Set<string>();
  for (const t of normaliseText(query).split(' ')) if (t !== '' && isContentTerm(t)) terms.add(t);
  return terms;
}

/**
 * Lexical relevance of a content to a query, in [0, 1]: the share of the query's distinct content terms
 * that occur as words of the content. 1 when every term occurs (the scale's top, as the best search hit
 * of a call); 0 when none does, or the query has no content term.
 */
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

/** What {@link cpuFilters} decides for candidates [0, packCount). */
export interface FilterOutcome {
  /** Candidates left to pack, input order. */
  pack: number[];
  /** Candidates filtered (history repeats, lexical floor, max_memories), input order. */
  filtered: number[];
}

/** The columns and settings {@link cpuFilters} reads. */
export interface FilterInput {
  packCount: number;
  ids: readonly string[];
  content: (i: number) => string;
  /** UTF-8 byte length of a candidate's content, read without decoding it (absent: every one is checked). */
  contentBytes?: (i: number) => number;
  /**
   * A candidate's content as UTF-8 bytes: the history-repeat check screens ASCII contents on them
   * without decoding (absent: every content is decoded and normalised).
   */
  contentUtf8?: (i: number) => Utf8Range;
  /** Mutated: a lexical relevance adds w_rel × relevance. */
  score: Float64Array;
  /** Mutated: NaN entries get their lexical relevance. */
  relevance: Float64Array;
  history: readonly ChatMessage[];
  filters: CpuFilters;
}

/**
 * Applies the filters in order: lexical relevance (and its floor) for candidates whose relevance is NaN,
 * memories already in the history, then `max_memories` over what is left by (score desc, memory_id asc).
 */
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
