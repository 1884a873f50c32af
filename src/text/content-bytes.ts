/**
 * Memory content as UTF-8 bytes across threads (contract.md §1 isolation rule).
 *
 * A thread that reads memories (the memory-body decoder, the store-read thread) hands each content to
 * the main thread as a `Uint8Array` view on one ArrayBuffer per answer, and transfers that buffer. The
 * main thread then never materialises memory text: it copies the bytes into the CPU task with
 * `Uint8Array.set`, where it used to decode strings from the structured clone and encode them to UTF-8
 * again (20 memories of 65,536 CJK code points: 14.9 ms of event loop as strings, 0.49 ms as bytes;
 * `bench:isolation`, `main_thread_crossing_ms`). The CPU stage reads the same UTF-8 it always did.
 */

import { utf8CodePointCount, utf8Text } from './utf8.js';

/** Memory content: the text, or its UTF-8 bytes when a retrieval thread encoded it ({@link bytesInPlace}). */
export type MemoryContent = string | Uint8Array;

/** Anything holding a memory content in `content` (a validated hit, or a store row's `memory`). */
interface HasContent {
  content: MemoryContent | null;
}

/**
 * Replaces every string `content` of `holders` with a view on one fresh ArrayBuffer holding their UTF-8
 * bytes, in order. Holders whose content is null or already bytes are left as they are.
 * @returns the ArrayBuffer to transfer with the holders, or `null` when no content was a string.
 */
export function bytesInPlace(holders: readonly HasContent[]): ArrayBuffer | null {
  let bytes = 0;
  let strings = 0;
  for (const h of holders) {
    if (typeof h.content === 'string') {
      bytes += Buffer.byteLength(h.content, 'utf8');
      strings++;
    }
  }
  if (strings === 0) return null;
  const buffer = new ArrayBuffer(bytes);
  const out = Buffer.from(buffer);
  let at = 0;
  for (const h of holders) {
    if (typeof h.content !== 'string') continue;
    const n = out.write(h.content, at, 'utf8');
    h.content = new Uint8Array(buffer, at, n);
    at += n;
  }
  return buffer;
}

/**
 * Whether UTF-8 `bytes` hold more than `max` code points, counted as Node decodes them
 * (`utf8CodePointCount`); `bytes.byteLength ≤ max` cannot exceed and is not read.
 */
export function utf8ExceedsCodePoints(bytes: Uint8Array, max: number): boolean {
  return bytes.byteLength > max && utf8CodePointCount(bytes, 0, bytes.byteLength) > max;
}

/**
 * The text of a content held either way (tools and tests: on the event loop the bytes are only copied).
 * `null` stays `null` (a store's oversize row).
 */
export function contentText(content: MemoryContent | null): string | null {
  if (content === null || typeof content === 'string') return content;
  return utf8Text(content, 0, content.byteLength);
}
