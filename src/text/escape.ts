/**
 * Escaping of untrusted memory text (contract.md §9). After escaping, memory text contains no `<` or `>`, so it
 * can neither open nor close an `<ibex_memory>` block, whatever nonce it guesses.
 */

import { isAscii, isUtf8 } from 'node:buffer';
import { codePointLength } from './estimate.js';
import { continuationBytes, continuationLanes, laneSum, WORD_LOOP_FROM } from './utf8.js';

// Chained replaceAll (`&` first, so entities are not escaped twice) measured ~2× faster than one regex
// with a callback on markup-heavy text and ~6× faster on plain text (no match: no copy).

/** Body escaping: `&`→`&amp;`, `<`→`&lt;`, `>`→`&gt;`. */
export function escapeBody(text: string): string {
  return text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
}

const ATTR_SPECIAL = /[&<>"']/;

/** Attribute escaping: body escaping plus `"`→`&quot;` and `'`→`&#x27;`. */
export function escapeAttr(text: string): string {
  // Ids, categories and nonces rarely hold any of the five: one scan instead of five.
  if (!ATTR_SPECIAL.test(text)) return text;
  return escapeBody(text).replaceAll('"', '&quot;').replaceAll("'", '&#x27;');
}

/** Occurrences of `ch` in `text`: native `indexOf` steps, no allocation. */
function countChar(text: string, ch: string): number {
  let count = 0;
  for (let i = text.indexOf(ch); i !== -1; i = text.indexOf(ch, i + 1)) count++;
  return count;
}

/**
 * Code-point length of `escapeBody(text)` (or `escapeAttr(text)` when `attr`) without building the escaped
 * copy or any other object (the copy cost ~0.65 s per 2 MB of markup on the main thread).
 * Every entity is ASCII, so escaping adds exactly its extra units to the text's code points; the escaped
 * characters are counted by native `indexOf` scans, which beat a charCodeAt loop even on dense markup.
 * @returns length in code points.
 */
export function escapedCodePointLength(text: string, attr = false): number {
  let length =
    codePointLength(text) + 4 * countChar(text, '&') + 3 * (countChar(text, '<') + countChar(text, '>'));
  if (attr) length += 5 * (countChar(text, '"') + countChar(text, "'"));
  return length;
}

/**
 * Code-point length of `escapeBody(text)` (or `escapeAttr(text)` when `attr`): `codePoints` plus the units
 * the entities add, counted in one allocation-free pass (see {@link measureText}).
 * @param codePoints the code-point length of `text`, already known to the caller.
 */
export function escapedLength(text: string, codePoints: number, attr = false): number {
  return escapedCodePointLength(text, attr) - codePointLength(text) + codePoints;
}

/** Bytes of UTF-8 `&`, `<` and `>`: the characters body escaping rewrites. */
const AMP = 0x26;
const LT = 0x3c;
const GT = 0x3e;
/** Words summed per 8-bit lane before a lane (≤ 1 per word) could overflow. */
const LANE_WORDS = 255;
/**
 * Spans shorter than this are decoded and measured as text: for a chat-sized ASCII memory that is ~30 ns
 * cheaper than the native checks' calls, and the decode of a short span is cheap whatever its script.
 */
const SHORT_SPAN = 256;

/**
 * Code-point length of `escapeBody(utf8Text(bytes, start, end))` from the UTF-8 bytes, without decoding them
 * (contract.md §6 wrapped-block cost). The CPU stage used to decode every candidate's content to a
 * string only to measure it: decoding took 6–20 ns per UTF-16 unit of a large non-ASCII or markup text,
 * 10–34 times this measure (`npm run bench:pack`, text measures, AMD machine). Well-formed UTF-8 has one
 * code point per byte that is not a continuation byte (util/utf8.ts), and every entity adds ASCII units:
 * `&amp;` 4, `&lt;`/`&gt;` 3. A span under 256 bytes is decoded and measured as text (cheaper there). A span
 * without `&`, `<`, `>` (three native memchr scans) counts continuation bytes only (none when it is ASCII);
 * one with them counts all four byte classes in one SWAR pass over 32-bit words. A malformed span is decoded
 * (Node's rules: each maximal invalid sequence one U+FFFD) and measured as text.
 * @param bytes the buffer holding the span; `start`/`end` byte offsets into it.
 * @returns length in code points, equal to `escapedCodePointLength(bytes.toString('utf8', start, end))`.
 */
export function escapedUtf8CodePoints(bytes: Buffer, start: number, end: number): number {
  if (end <= start) return 0;
  if (end - start < SHORT_SPAN) return escapedCodePointLength(bytes.toString('utf8', start, end));
  const span = bytes.subarray(start, end);
  // Both checks are native (simdutf); ASCII needs no continuation count.
  const ascii = isAscii(span);
  if (!ascii && !isUtf8(span)) return escapedCodePointLength(span.toString('utf8'));
  if (span.indexOf(AMP) === -1 && span.indexOf(LT) === -1 && span.indexOf(GT) === -1) {
    return ascii ? end - start : end - start - continuationBytes(bytes, start, end);
  }
  return escapedWellFormed(bytes, start, end);
}

/** {@link escapedUtf8CodePoints} of a well-formed span with entities to count: one SWAR pass. */
function escapedWellFormed(bytes: Uint8Array, start: number, end: number): number {
  let continuation = 0;
  let amp = 0;
  let angle = 0;
  let i = start;
  const byte = (b: number) => {
    if ((b & 0xc0) === 0x80) continuation++;
    else if (b === AMP) amp++;
    else if ((b | 2) === GT) angle++;
  };
  if (end - start >= WORD_LOOP_FROM) {
    while ((bytes.byteOffset + i) & 3) byte(bytes[i++]!);
    const words = (end - i) >>> 2;
    const w = new Uint32Array(bytes.buffer, bytes.byteOffset + i, words);
    for (let k = 0; k < words; ) {
      const stop = Math.min(words, k + LANE_WORDS);
      let laneC = 0;
      let laneA = 0;
      let laneG = 0;
      for (; k < stop; k++) {
        const x = w[k]!;
        laneC = (laneC + continuationLanes(x)) | 0;
        // A byte of y is 0 exactly when bit 7 of ~(((y & 0x7f) + 0x7f) | y | 0x7f) is set: no carry
        // crosses a byte, so the count is exact. `<` and `>` differ only in bit 1: one test for both.
        const ya = x ^ 0x26262626;
        laneA = (laneA + (~(((ya & 0x7f7f7f7f) + 0x7f7f7f7f) | ya | 0x7f7f7f7f) >>> 7)) | 0;
        const yg = (x ^ 0x3c3c3c3c) & 0xfdfdfdfd;
        laneG = (laneG + (~(((yg & 0x7f7f7f7f) + 0x7f7f7f7f) | yg | 0x7f7f7f7f) >>> 7)) | 0;
      }
      continuation += laneSum(laneC);
      amp += laneSum(laneA);
      angle += laneSum(laneG);
    }
    i += 4 * words;
  }
  while (i < end) byte(bytes[i++]!);
  return end - start - continuation + 4 * amp + 3 * angle;
}
