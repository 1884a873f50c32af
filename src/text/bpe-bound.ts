/**
 * Upper bounds on exact BPE counts from UTF-8 byte lengths (contract.md §1 isolation rule, §5), for the one
 * answer built on the main thread (the degraded answer of contract.md §10): an exact count is linear in the
 * text with a large constant (tens of ns per character, and the encoding's cache misses on untrusted
 * text), so the main thread never runs it on history or directive text; it charges a bound instead.
 *
 * Why the bound holds: `o200k_base` and `cl100k_base` are byte-level BPEs, every token stands for at least
 * one byte, so an exact count never exceeds the text's UTF-8 byte length. {@link bpeCount} counts a chunk
 * longer than `MAX_EXACT_CHUNK` UTF-16 units in pieces plus one token per cut; a piece before a cut holds
 * at least `MAX_EXACT_CHUNK - 1` units (one less when a surrogate pair would be split), each at least one
 * byte: at most one cut per `MAX_EXACT_CHUNK - 1` bytes.
 */
import { MAX_EXACT_CHUNK } from './bpe.js';

/**
 * Largest token count {@link bpeCount} can give a text of `utf8Bytes` bytes under either BPE kind.
 * @param utf8Bytes UTF-8 byte length of the text (≥ 0).
 * @returns tokens, ≥ the exact count; 0 for the empty text.
 */
export function bpeTokenBound(utf8Bytes: number): number {
  if (utf8Bytes <= 0) return 0;
  return utf8Bytes + Math.floor(utf8Bytes / (MAX_EXACT_CHUNK - 1));
}

/** Bytes of U+FFFD, what each byte of an invalid UTF-8 sequence decodes to at most. */
const REPLACEMENT_BYTES = 3;

/**
 * Bound on the BPE count of a history's text (`<role>: <content>` lines joined by `\n`, contract.md §5) from its
 * byte spans and decoded roles (≤ 64 code points each once validated): O(messages), no content byte is
 * read. An invalid content is charged as if every byte became U+FFFD (Node's decoding of it, which the
 * answer carries).
 * @param h the history's spans (4 offsets per message: role start/end, content start/end).
 * @param measure per message: the decoded role, and 1 where the content is valid UTF-8.
 */
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
