/**
 * The memories a degraded answer keeps when the CPU stage was lost for time or saturation (contract.md
 * §10, "degrade in steps"): candidates taken greedily in rank order while their wrapped blocks fit the
 * budget left for memories, measured and later escaped on the main thread — so only a fixed amount of
 * memory text, {@link DEGRADED_MEMORY_TEXT_BYTES}, is ever read here, whatever the request's size.
 */

import { wrappedBlockLength } from '../budget/budget-calculator.js';
import type { SplicedMemory } from '../format/history-utf8.js';
import { isBpeKind } from '../text/bpe.js';
import { bpeTokenBound } from '../text/bpe-bound.js';
import type { MemoryContent } from '../text/content-bytes.js';
import { escapedCodePointLength, escapedUtf8CodePoints } from '../text/escape.js';
import { codePointLength, type EstimateKind, estimateFromLength } from '../text/estimate.js';
import { isUtf8Span, utf8Text } from '../text/utf8.js';

/**
 * UTF-8 bytes of memory text (ids, categories, escaped contents) the main thread may measure and format for
 * one degraded answer. The degraded answer runs on the event loop exactly when it is short of time (a lost
 * CPU stage, a saturated pool), and its reserve is measured per call: its memory work must be a small
 * constant, never proportional to the candidates' size. 32 KiB is a handful of chat-sized memories: about
 * 0.05 ms to measure and format as plain text, under 0.5 ms when it is all markup (an entity per byte).
 * A candidate that would take the total past it is not read.
 */
export const DEGRADED_MEMORY_TEXT_BYTES = 32 * 1024;

/** What the selection reads of a scored candidate. */
export interface DegradedCandidate {
  memory_id: string;
  category: string;
  content: MemoryContent;
}

/** What the memories may cost. */
export interface DegradedMemoryLimits {
  /** The answer's estimate kind: a `bpe_*` kind is charged byte bounds, never counted here. */
  kind: EstimateKind;
  /** Length of the prompt's nonce (base64url: nothing to escape). */
  nonceChars: number;
  /** Tokens left for memories: the budget's `usable_budget`. */
  usable: number;
  /**
   * `bpe_*` kinds only: UTF-8 bytes of the answer without memories, and the most `tokens_used` may be.
   * The answer's `tokens_used` is then the bound of its whole byte length, and per-part bounds do not add
   * up to it exactly: the greedy checks the whole answer's bound at each step.
   */
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

/**
 * A candidate read: its memory for the formatter and block length (code points, or bytes under `bpe_*`),
 * or null when its escaped text turned out larger than the room left; `bytes` is what reading it cost.
 */
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

/**
 * Measures one candidate whose text, escaped, fits in `room` bytes; null when its length alone shows it
 * does not (nothing read). What it costs is its id and category bytes plus its escaped content bytes: the
 * bytes the formatter writes, so markup (an entity per byte, the slow case) gets less room than plain text.
 * `bytes` counts the block length in UTF-8 bytes (`bpe_*` kinds) instead of code points.
 */
function measure(c: DegradedCandidate, room: number, nonceChars: number, bytes: boolean): Measured | null {
  const fields = c.memory_id.length + c.category.length;
  // UTF-16 units never exceed UTF-8 bytes, escaping only adds, and a byte content knows its length:
  // nothing is scanned yet.
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
      // Well-formed bytes are escaped into the answer as they are, never decoded (as the CPU stage does).
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
 * Greedy selection for the stepped degraded answer (contract.md §10): candidates in rank order, each
 * kept when its wrapped block (contract.md §6 cost: open tag, escaped body, close tag, joining newline)
 * fits what is left of `usable`. Under an estimate kind a block costs the estimate of its code points
 * (estimates are subadditive, so the answer's `tokens_used` stays within its fixed parts plus `usable`);
 * under a `bpe_*` kind the byte bound of src/text/bpe-bound.ts, and the whole answer's bound must also
 * stay within `bound.limit`. A candidate whose text would take the memory text read past `textBytes` is
 * not read at all (cost 0, row `failed`); one read and not kept counts against it too, so the main thread
 * reads at most `textBytes` of memory text.
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
      // The answer: what it had, the `\n\n` before the memory section when something precedes it, the
      // blocks without the last joining newline.
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

/**
 * Drops the last kept memory of `s` (its row becomes `budget`): the answer's safety net when its formatted
 * `tokens_used` came out over its limit, which the costs above rule out.
 */
export function dropLastMemory(s: DegradedSelection): void {
  const i = s.included.pop();
  if (i === undefined) return;
  s.memories.pop();
  s.memoryTokens -= s.costs[i]!;
  s.excluded.push(i);
  s.excluded.sort((x, y) => x - y);
}
