/** Upper bounds on exact BPE counts from UTF-8 byte lengths, for the main thread (proof: docs/overload.md). */
import { MAX_EXACT_CHUNK } from './bpe.js';

/** Largest count {@link bpeCount} can give a text of `utf8Bytes` bytes under either BPE kind; 0 for empty. */
export function bpeTokenBound(utf8Bytes: number): number {
  if (utf8Bytes <= 0) return 0;
  return utf8Bytes + Math.floor(utf8Bytes / (MAX_EXACT_CHUNK - 1));
}

const REPLACEMENT_BYTES = 3;

/** Bound on a history's BPE count from its spans, O(messages); invalid content is charged as all U+FFFD. */
export function historyTokenBound(
  h: { spans: Uint32Array; count: number },
  measure: { roles: readonly string[]; contentValid: Uint8Array },
): number {
  const { spans, count } = h;
  if (count === 0) return 0;
  let bytes = count - 1;
  for (let i = 0; i < count; i++) {
    const content = spans[4 * i + 3]! - spans[4 * i + 2]!;
    bytes +=
      Buffer.byteLength(measure.roles[i]!, 'utf8') +
      2 +
      (measure.contentValid[i] ? content : REPLACEMENT_BYTES * content);
  }
  return bpeTokenBound(bytes);
}
