/** The memories a degraded answer keeps (contract.md §10): bounded main-thread work (docs/overload.md). */

import { wrappedBlockLength } from '../budget/budget-calculator.js';
import type { SplicedMemory } from '../format/history-utf8.js';
import { isBpeKind } from '../text/bpe.js';
import { bpeTokenBound } from '../text/bpe-bound.js';
import type { MemoryContent } from '../text/content-bytes.js';
import { escapedCodePointLength, escapedUtf8CodePoints } from '../text/escape.js';
import { codePointLength, type EstimateKind, estimateFromLength } from '../text/estimate.js';
import { isUtf8Span, utf8Text } from '../text/utf8.js';

/** Memory text (UTF-8 bytes) one degraded answer may read on the main thread; past it a candidate is not read. */
export const DEGRADED_MEMORY_TEXT_BYTES = 32 * 1024;

export interface DegradedCandidate {
  memory_id: string;
  category: string;
  content: MemoryContent;
}

export interface DegradedMemoryLimits {
  /** The answer's estimate kind: a `bpe_*` kind is charged byte bounds, never counted here. */
  kind: EstimateKind;
  /** Length of the prompt's nonce (base64url: nothing to escape) */
  nonceChars: number;
  /** Tokens left for memories: the budget's `usable_budget`. */
  usable: number;
  /** `bpe_*` kinds only: UTF-8 bytes of the answer without memories, and the most `tokens_used` may be. */
  bound?: { baseBytes: number; limit: number };
  /** Memory text read at most, UTF-8 bytes (default {@link DEGRADED_MEMORY_TEXT_BYTES}). */
  textBytes?: number;
}

/** The kept memories and what each candidate's row says. */
export interface DegradedSelection {
  /** Kept memories in rank order, ready for the formatter. */
  memories: SplicedMemory[];
  /** Indices of the kept candidates (rows `included`), rank order. */
  included: number[];
  /** Indices of the candidates that were costed and did not fit (rows `budget`). */
  excluded: number[];
  /** Each candidate's wrapped-block cost in tokens; 0 for those not read (rows `failed`). */
  costs: Int32Array;
  /** Sum of the kept memories' costs. */
  memoryTokens: number;
  /** Memory text read on the main thread, UTF-8 bytes (escaped contents; ≤ the limit's `textBytes`). */
  textBytes: number;
}

/** A candidate read (memory + block length), or null when its escaped text exceeded the room left. */
type Measured =
  | { memory: SplicedMemory; blockLength: number; bytes: number }
  | { memory: null; bytes: number };

const AMP = 0x26;
const LT = 0x3c;
const GT = 0x3e;

function countByte(span: Buffer, b: number): number {
  let count = 0;
  for (let i = span.indexOf(b); i !== -1; i = span.indexOf(b, i + 1)) count++;
  return count;
}

/** UTF-8 bytes of `text` once escaped (body, or attribute when `attr`): every entity is ASCII. */
function escapedUtf8Length(text: string, attr = false): number {
  return Buffer.byteLength(text, 'utf8') + escapedCodePointLength(text, attr) - codePointLength(text);
}

/** Measures one candidate whose escaped text fits in `room` bytes; null (nothing read) when it cannot. */
function measure(c: DegradedCandidate, room: number, nonceChars: number, bytes: boolean): Measured | null {
  const fields = c.memory_id.length + c.category.length;
  const least = fields + (typeof c.content === 'string' ? c.content.length : c.content.byteLength);
  if (least > room) return null;
  const idLength = bytes ? escapedUtf8Length(c.memory_id, true) : escapedCodePointLength(c.memory_id, true);
  const categoryLength = bytes
    ? escapedUtf8Length(c.category, true)
    : escapedCodePointLength(c.category, true);
  const fieldBytes = Buffer.byteLength(c.memory_id, 'utf8') + Buffer.byteLength(c.category, 'utf8');
  let content = c.content;
  // A malformed byte content costs at least its own bytes, however it decodes.
  let floor = 0;
  if (typeof content !== 'string') {
    const span = Buffer.from(content.buffer, content.byteOffset, content.byteLength);
    if (isUtf8Span(span, 0, span.byteLength)) {
      const escapedBytes =
        span.byteLength + 4 * countByte(span, AMP) + 3 * (countByte(span, LT) + countByte(span, GT));
      if (fieldBytes + escapedBytes > room) return { memory: null, bytes: room };
      const escapedCodePoints = escapedUtf8CodePoints(span, 0, span.byteLength);
      return {
        memory: {
          memory_id: c.memory_id,
          category: c.category,
          bytes: span,
          start: 0,
          end: span.byteLength,
          escapedCodePoints,
        },
        blockLength: wrappedBlockLength(
          idLength,
          categoryLength,
          bytes ? escapedBytes : escapedCodePoints,
          nonceChars,
        ),
        bytes: fieldBytes + escapedBytes,
      };
    }
    // Malformed bytes: what the answer carries is Node's decoding (U+FFFD per invalid sequence).
    floor = span.byteLength;
    content = utf8Text(span, 0, span.byteLength);
  }
  const codePoints = codePointLength(content);
  const entities = escapedCodePointLength(content) - codePoints;
  const escapedBytes = Buffer.byteLength(content, 'utf8') + entities;
  const read = fieldBytes + Math.max(floor, escapedBytes);
  if (read > room) return { memory: null, bytes: room };
  return {
    memory: { memory_id: c.memory_id, category: c.category, content },
    blockLength: wrappedBlockLength(
      idLength,
      categoryLength,
      bytes ? escapedBytes : codePoints + entities,
      nonceChars,
    ),
    bytes: read,
  };
}

/**
 * Greedy selection for the stepped degraded answer: candidates in rank order, each kept when its wrapped
 * block (contract.md §6 cost) fits what is left of `usable` (and, under `bpe_*`, `bound.limit`); reads at
 * most `textBytes` of memory text.
 * @param kept candidates within `max_memories`, in rank order.
 */
export function selectDegradedMemories(
  kept: readonly DegradedCandidate[],
  limits: DegradedMemoryLimits,
): DegradedSelection {
  const bpe = isBpeKind(limits.kind);
  const textLimit = limits.textBytes ?? DEGRADED_MEMORY_TEXT_BYTES;
  const costs = new Int32Array(kept.length);
  const memories: SplicedMemory[] = [];
  const included: number[] = [];
  const excluded: number[] = [];
  let textBytes = 0;
  let memoryTokens = 0;
  // bpe_*: bytes of the memory section so far, blocks with their joining newlines.
  let sectionBytes = 0;
  for (let i = 0; i < kept.length && limits.usable - memoryTokens > 0; i++) {
    const m = measure(kept[i]!, textLimit - textBytes, limits.nonceChars, bpe);
    if (m === null) continue;
    textBytes += m.bytes;
    if (m.memory === null) continue;
    const cost = bpe ? bpeTokenBound(m.blockLength) : estimateFromLength(m.blockLength, limits.kind);
    costs[i] = cost;
    let fits = memoryTokens + cost <= limits.usable;
    if (fits && bpe) {
      const b = limits.bound;
      const total = b ? b.baseBytes + (b.baseBytes > 0 ? 2 : 0) + sectionBytes + m.blockLength - 1 : 0;
      fits = b !== undefined && bpeTokenBound(total) <= b.limit;
    }
    if (!fits) {
      excluded.push(i);
      continue;
    }
    memories.push(m.memory);
    included.push(i);
    memoryTokens += cost;
    sectionBytes += m.blockLength;
  }
  return { memories, included, excluded, costs, memoryTokens, textBytes };
}

/** Drops the last kept memory (row `budget`): safety net when `tokens_used` came out over its limit. */
export function dropLastMemory(s: DegradedSelection): void {
  const i = s.included.pop();
  if (i === undefined) return;
  s.memories.pop();
  s.memoryTokens -= s.costs[i]!;
  s.excluded.push(i);
  s.excluded.sort((x, y) => x - y);
}
