/**
 * History as bytes (contract.md §1 isolation rule): the request's messages as UTF-8 byte spans into the
 * request buffer, decoded only by the CPU stage — or by the main thread for the L2 degraded answer.
 */
import { decodeSpans } from '../format/assembly-text.js';
import { utf8CodePointCount } from '../text/utf8.js';
import { LIMITS } from '../wire/limits.js';
import type { ChatMessage } from '../wire/types.js';

/**
 * History messages as byte spans into `source` (UTF-8, not decoded): message i's role is
 * `source[spans[4i], spans[4i+1])`, its content `source[spans[4i+2], spans[4i+3])`.
 */
export interface HistoryBytes {
  source: Uint8Array;
  /** 4 × count byte offsets into `source`. */
  spans: Uint32Array;
  /** Number of messages (≤ 100 once validated). */
  count: number;
  /**
   * True when some content's code-point length cannot be decided from its byte length (32,768 < bytes ≤
   * 131,072): the CPU stage (or {@link checkHistoryContents}) decides it.
   */
  contentPending: boolean;
}

/** The messages of `h` decoded to strings (raw role and content). Costs one pass over their bytes. */
export function decodeHistory(h: HistoryBytes): ChatMessage[] {
  return decodeSpans(h);
}

/** History bytes of already-decoded messages (the object path: tests, tools, warm-up). */
export function encodeHistory(messages: readonly ChatMessage[]): HistoryBytes {
  const parts: Buffer[] = [];
  const spans = new Uint32Array(4 * messages.length);
  let at = 0;
  let contentPending = false;
  messages.forEach((m, i) => {
    const role = Buffer.from(m.role, 'utf8');
    const content = Buffer.from(m.content, 'utf8');
    spans.set([at, at + role.length, at + role.length, at + role.length + content.length], 4 * i);
    at += role.length + content.length;
    parts.push(role, content);
    if (content.length > LIMITS.contentChars) contentPending = true;
  });
  return { source: Buffer.concat(parts, at), spans, count: messages.length, contentPending };
}

/** The contract.md §11 detail for a content over its limit. */
export const CONTENT_OVER = `message.content exceeds ${LIMITS.contentChars} characters`;

/**
 * Decides the contents left pending by the wire (exact code points). The main thread calls it only where
 * an answer must be decided before the CPU stage (an invalid request that a later check would refuse).
 * @returns true when some content exceeds 32,768 code points.
 */
export function checkHistoryContents(h: HistoryBytes): boolean {
  if (!h.contentPending) return false;
  for (let i = 0; i < h.count; i++) {
    const start = h.spans[4 * i + 2]!;
    const end = h.spans[4 * i + 3]!;
    if (end - start > LIMITS.contentChars && utf8CodePointCount(h.source, start, end) > LIMITS.contentChars)
      return true;
  }
  return false;
}
