/**
 * Measures of UTF-8 bytes without decoding them (contract.md §1 isolation rule: the CPU stage works on bytes;
 * contract.md §5: estimates depend only on the code-point count L).
 *
 * Valid UTF-8 (checked natively by `isUtf8`) has one code point per byte that is not a continuation byte
 * (`10xxxxxx`), so L = bytes − continuation bytes, counted four bytes at a time. Invalid input is decoded
 * the way Node decodes it everywhere else (each maximal invalid sequence becomes one U+FFFD), so every
 * count here equals what decode-then-count gives.
 */
import { isUtf8 } from 'node:buffer';
import { codePointLength } from './estimate.js';

/** Below this many bytes a plain byte loop beats setting up the word view. */
export const WORD_LOOP_FROM = 32;
/** Four-word steps summed per lane before a lane (8 bits, ≤ 4 per step) could overflow. */
const LANE_STEPS = 63;
/** 0x01 in each byte lane of a 32-bit word: SWAR per-byte flags and sums. */
const LANES = 0x01010101;

/** 0x01 in each byte lane of `x` that holds a continuation byte (`10xxxxxx`), 0 elsewhere. */
export const continuationLanes = (x: number) => ((x & ~(x << 1)) >>> 7) & LANES;

/** Sum of the four 8-bit lanes of `lanes`. */
export function laneSum(lanes: number): number {
  return (lanes & 0xff) + ((lanes >>> 8) & 0xff) + ((lanes >>> 16) & 0xff) + (lanes >>> 24);
}

/**
 * Continuation bytes (`10xxxxxx`) in `bytes[start, end)`: a SWAR loop over aligned 32-bit words (a byte b
 * is a continuation byte iff bit 7 is set and bit 6 is clear, i.e. `b & ~(b << 1) & 0x80`), four words a
 * step (fewer loop-carried additions than one word a step, which was slower on CJK and emoji text in a
 * side-by-side run), bytewise at the unaligned ends. Byte order does not matter for a count.
 */
export function continuationBytes(bytes: Uint8Array, start: number, end: number): number {
  let count = 0;
  let i = start;
  if (end - start >= WORD_LOOP_FROM) {
    while ((bytes.byteOffset + i) & 3) {
      if ((bytes[i]! & 0xc0) === 0x80) count++;
      i++;
    }
    const words = (end - i) >>> 2;
    const w = new Uint32Array(bytes.buffer, bytes.byteOffset + i, words);
    let k = 0;
    while (k + 4 <= words) {
      const stop = Math.min(words - 3, k + 4 * LANE_STEPS);
      let lanes = 0;
      for (; k < stop; k += 4) {
        lanes =
          (lanes +
            continuationLanes(w[k]!) +
            continuationLanes(w[k + 1]!) +
            continuationLanes(w[k + 2]!) +
            continuationLanes(w[k + 3]!)) |
          0;
      }
      count += laneSum(lanes);
    }
    for (; k < words; k++) count += laneSum(continuationLanes(w[k]!));
    i += 4 * words;
  }
  for (; i < end; i++) if ((bytes[i]! & 0xc0) === 0x80) count++;
  return count;
}

/** Whether `bytes[start, end)` is well-formed UTF-8 (native check; no surrogates, no overlongs). */
export function isUtf8Span(bytes: Uint8Array, start: number, end: number): boolean {
  // isUtf8 refuses a detached buffer by throwing; an empty span is valid either way.
  return end <= start || isUtf8(bytes.subarray(start, end));
}

/**
 * Code points of `bytes[start, end)` as Node decodes it: for valid UTF-8, the bytes that are not
 * continuation bytes; otherwise the decoded text's code points (invalid sequences become U+FFFD, one each).
 * @param valid the span's validity when the caller already knows it (skips the check).
 */
export function utf8CodePointCount(
  bytes: Uint8Array,
  start: number,
  end: number,
  valid = isUtf8Span(bytes, start, end),
): number {
  if (valid) return end - start - continuationBytes(bytes, start, end);
  return codePointLength(Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString('utf8'));
}

/** UTF-8 text of `bytes[start, end)` (Node's decoder: invalid sequences become U+FFFD). */
export function utf8Text(bytes: Uint8Array, start: number, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString('utf8');
}
