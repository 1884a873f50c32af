/** Measures of UTF-8 bytes without decoding them; invalid input counts as Node decodes it. */
import { isUtf8 } from 'node:buffer';
import { codePointLength } from './estimate.js';

export const WORD_LOOP_FROM = 32;
const LANE_STEPS = 63;
const LANES = 0x01010101;

export const continuationLanes = (x: number) => ((x & ~(x << 1)) >>> 7) & LANES;

export function laneSum(lanes: number): number {
  return (lanes & 0xff) + ((lanes >>> 8) & 0xff) + ((lanes >>> 16) & 0xff) + (lanes >>> 24);
}

/** Continuation bytes in `bytes[start, end)`: SWAR over aligned 32-bit words, four a step. */
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

export function isUtf8Span(bytes: Uint8Array, start: number, end: number): boolean {
  // isUtf8 throws on a detached buffer.
  return end <= start || isUtf8(bytes.subarray(start, end));
}

/** Code points of `bytes[start, end)` as Node decodes it; `valid` skips the check when known. */
export function utf8CodePointCount(
  bytes: Uint8Array,
  start: number,
  end: number,
  valid = isUtf8Span(bytes, start, end),
): number {
  if (valid) return end - start - continuationBytes(bytes, start, end);
  return codePointLength(Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString('utf8'));
}

export function utf8Text(bytes: Uint8Array, start: number, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString('utf8');
}
