/** History as UTF-8 byte spans into the request buffer, decoded only by the CPU stage or the L2 answer. */
import { decodeSpans } from '../format/assembly-text.js';
import { utf8CodePointCount } from '../text/utf8.js';
import { LIMITS } from '../wire/limits.js';
import type { ChatMessage } from '../wire/types.js';

/** History as byte spans into `source`: message i's role `spans[4i..4i+1]`, content `spans[4i+2..4i+3]`. */
export interface HistoryBytes {
  source: Uint8Array;
  /** 4 × count byte offsets into `source`. */
  spans: Uint32Array;
  /** Number of messages (≤ 100 once validated) */
  count: number;
  /** Some content's code-point length is undecided from its bytes (32,768 < bytes ≤ 131,072). */
  contentPending: boolean;
}

/** The messages of `h` decoded to strings (raw role and content). Costs one pass over their bytes. */
export function decodeHistory(h: HistoryBytes): ChatMessage[] {
  return decodeSpans(h);
}

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

export const CONTENT_OVER = `message.content exceeds ${LIMITS.contentChars} characters`;

/**
 * Decides the contents left pending by the wire (exact code points), where an answer is needed before
 * the CPU stage. @returns true when some content exceeds 32,768 code points.
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
