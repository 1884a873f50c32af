/** Escaping of untrusted memory text (contract.md §9): no `<` or `>` remains to open or close a block. */

import { isAscii, isUtf8 } from 'node:buffer';
import { codePointLength } from './estimate.js';
import { continuationBytes, continuationLanes, laneSum, WORD_LOOP_FROM } from './utf8.js';

// `&` first, so entities are not escaped twice.

export function escapeBody(text: string): string {
  return text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
}

const ATTR_SPECIAL = /[&<>"']/;

export function escapeAttr(text: string): string {
  if (!ATTR_SPECIAL.test(text)) return text;
  return escapeBody(text).replaceAll('"', '&quot;').replaceAll("'", '&#x27;');
}

function countChar(text: string, ch: string): number {
  let count = 0;
  for (let i = text.indexOf(ch); i !== -1; i = text.indexOf(ch, i + 1)) count++;
  return count;
}

/** Code points of `escapeBody(text)` (or `escapeAttr` when `attr`) without building the escaped copy. */
export function escapedCodePointLength(text: string, attr = false): number {
  let length =
    codePointLength(text) + 4 * countChar(text, '&') + 3 * (countChar(text, '<') + countChar(text, '>'));
  if (attr) length += 5 * (countChar(text, '"') + countChar(text, "'"));
  return length;
}

export function escapedLength(text: string, codePoints: number, attr = false): number {
  return escapedCodePointLength(text, attr) - codePointLength(text) + codePoints;
}

const AMP = 0x26;
const LT = 0x3c;
const GT = 0x3e;
const LANE_WORDS = 255;
const SHORT_SPAN = 256;

/** Code points of the escaped text from its UTF-8 bytes, without decoding a well-formed span (contract.md §6). */
export function escapedUtf8CodePoints(bytes: Buffer, start: number, end: number): number {
  if (end <= start) return 0;
  if (end - start < SHORT_SPAN) return escapedCodePointLength(bytes.toString('utf8', start, end));
  const span = bytes.subarray(start, end);
  const ascii = isAscii(span);
  if (!ascii && !isUtf8(span)) return escapedCodePointLength(span.toString('utf8'));
  if (span.indexOf(AMP) === -1 && span.indexOf(LT) === -1 && span.indexOf(GT) === -1) {
    return ascii ? end - start : end - start - continuationBytes(bytes, start, end);
  }
  return escapedWellFormed(bytes, start, end);
}

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
        // A byte of y is 0 iff bit 7 of ~(((y & 0x7f) + 0x7f) | y | 0x7f) is set (no carry crosses a byte).
        // `<` and `>` differ only in bit 1: one test for both.
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
