/** Memory content as UTF-8 bytes across threads, so the main thread never decodes memory text (contract.md §1). */

import { utf8CodePointCount, utf8Text } from './utf8.js';

export type MemoryContent = string | Uint8Array;

interface HasContent {
  content: MemoryContent | null;
}

/** Moves string contents into one fresh ArrayBuffer; @returns it to transfer, or null if none was a string. */
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

/** Whether `bytes` hold more than `max` code points as Node decodes them. */
export function utf8ExceedsCodePoints(bytes: Uint8Array, max: number): boolean {
  return bytes.byteLength > max && utf8CodePointCount(bytes, 0, bytes.byteLength) > max;
}

export function contentText(content: MemoryContent | null): string | null {
  if (content === null || typeof content === 'string') return content;
  return utf8Text(content, 0, content.byteLength);
}
