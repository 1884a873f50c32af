/** Encoding of the CPU task's batch (src/cpu-stage/cpu-batch.ts). */
import { isPooledMessageView } from '../util/message-buffers.js';
import type { CandidateFields, CpuTaskInput, CpuTaskScalars } from './cpu-batch.js';

const F64 = Float64Array.BYTES_PER_ELEMENT;
const FLOAT_COLUMNS = 7;
const I32 = Int32Array.BYTES_PER_ELEMENT;

/** Histories from this size travel in the request's own buffer, uncopied, when it has one. */
export const TRANSFER_HISTORY_FROM_BYTES = 64 * 1024;

/**
 * Whether `source` can be transferred as it is: it views (all but a gRPC frame header of) an ArrayBuffer
 * of its own, or a recycled message buffer. A Node pool Buffer or a slice of another buffer is copied.
 */
export function ownsItsBuffer(source: Uint8Array): boolean {
  return (
    source.byteLength >= TRANSFER_HISTORY_FROM_BYTES &&
    source.buffer instanceof ArrayBuffer &&
    (source.buffer.byteLength - source.byteLength <= 16 || isPooledMessageView(source))
  );
}

/**
 * Encodes candidates into the typed-array batch of {@link CpuTaskInput}: one fresh ArrayBuffer, plus a
 * large history's own request buffer, which stays detached in the sender until the pool hands it back.
 * @param candidates in any order; output indices refer to this order.
 * @param scalars everything else the task needs; `deadline` on the epoch clock.
 */
export function encodeCandidates(
  candidates: readonly CandidateFields[],
  scalars: CpuTaskScalars,
  history?: HistoryBytesLike,
): CpuTaskInput {
  const n = candidates.length;
  const h = history?.count ?? 0;
  let historyBytes = 0;
  for (let k = 0; k < h; k++) historyBytes += history!.spans[4 * k + 3]! - history!.spans[4 * k + 2]!;
  for (let k = 0; k < h; k++) historyBytes += history!.spans[4 * k + 1]! - history!.spans[4 * k]!;
  const transfer = h > 0 && historyBytes >= TRANSFER_HISTORY_FROM_BYTES && ownsItsBuffer(history!.source);
  if (transfer) historyBytes = 0;
  // A close-together small history is copied as one range, gaps (same request's bytes, never spanned) included.
  const range = h > 0 && !transfer ? historyRange(history!, historyBytes) : null;
  if (range !== null) historyBytes = range.end - range.start;
  // Room for the worst case (3 bytes per UTF-16 unit) instead of measuring first; the slack is not copied.
  let textRoom = 0;
  for (const c of candidates) {
    textRoom += 3 * (c.memory_id.length + c.category.length);
    textRoom += typeof c.content === 'string' ? 3 * c.content.length : c.content.byteLength;
  }
  // Keeps every view aligned.
  const f64 = FLOAT_COLUMNS * n * F64;
  const numericBytes = f64 + 2 * n * I32 + (3 * n + 1 + 4 * h) * I32;
  const buffer = new ArrayBuffer(numericBytes + textRoom + historyBytes);
  const score = new Float64Array(buffer, 0, n);
  const similarity = new Float64Array(buffer, n * F64, n);
  const confidence = new Float64Array(buffer, 2 * n * F64, n);
  const relevance = new Float64Array(buffer, 3 * n * F64, n);
  const recency = new Float64Array(buffer, 4 * n * F64, n);
  const usefulness = new Float64Array(buffer, 5 * n * F64, n);
  const createdAt = new Float64Array(buffer, 6 * n * F64, n);
  const rank = new Int32Array(buffer, f64, n);
  const tokens = new Int32Array(buffer, f64 + n * I32, n);
  const offsets = new Uint32Array(buffer, f64 + 2 * n * I32, 3 * n + 1);
  const historySpans = new Uint32Array(buffer, f64 + 2 * n * I32 + (3 * n + 1) * I32, 4 * h);
  const bytes = Buffer.from(buffer, numericBytes, textRoom + historyBytes);
  let at = 0;
  for (let i = 0; i < n; i++) {
    const c = candidates[i]!;
    score[i] = c.score;
    similarity[i] = c.similarity;
    confidence[i] = c.confidence;
    relevance[i] = c.relevance ?? c.similarity;
    recency[i] = c.recency ?? 0;
    usefulness[i] = c.usefulness ?? 0;
    createdAt[i] = c.created_at_ms ?? Number.NaN;
    rank[i] = c.rank;
    tokens[i] = c.tokens ?? 0;
    offsets[3 * i] = at;
    at = writeShort(bytes, c.memory_id, at);
    offsets[3 * i + 1] = at;
    at = writeShort(bytes, c.category, at);
    offsets[3 * i + 2] = at;
    if (typeof c.content === 'string') at += bytes.write(c.content, at, 'utf8');
    else {
      bytes.set(c.content, at);
      at += c.content.byteLength;
    }
  }
  offsets[3 * n] = at;
  const text = new Uint8Array(buffer, numericBytes, at);
  let historyView: Uint8Array = new Uint8Array(buffer, numericBytes + at, 0);
  if (transfer) {
    historyView = history!.source;
    historySpans.set(history!.spans.subarray(0, 4 * h));
  } else if (range !== null) {
    const sp = history!.spans;
    for (let j = 0; j < 4 * h; j++) historySpans[j] = sp[j]! - range.start;
    bytes.set(history!.source.subarray(range.start, range.end), at);
    historyView = new Uint8Array(buffer, numericBytes + at, range.end - range.start);
  } else if (h > 0) {
    const start = at;
    const sp = history!.spans;
    for (let j = 0; j < 4 * h; j += 2) {
      historySpans[j] = at - start;
      bytes.set(history!.source.subarray(sp[j]!, sp[j + 1]!), at);
      at += sp[j + 1]! - sp[j]!;
      historySpans[j + 1] = at - start;
    }
    historyView = new Uint8Array(buffer, numericBytes + start, at - start);
  }
  // Written field by field, not `...scalars`: see docs/design/packing.md, "Object shapes".
  return {
    budget: scalars.budget,
    dpCellCeiling: scalars.dpCellCeiling,
    maxConsecutiveSkips: scalars.maxConsecutiveSkips,
    nonce: scalars.nonce,
    directive: scalars.directive,
    recentMessages: scalars.recentMessages,
    toolSchemas: scalars.toolSchemas,
    budgetModel: scalars.budgetModel,
    nonceBytes: scalars.nonceBytes,
    availableTokens: scalars.availableTokens,
    packCount: scalars.packCount,
    filters: scalars.filters,
    memoryDates: scalars.memoryDates,
    deadline: scalars.deadline,
    historyCount: h,
    historyContentPending: history?.contentPending ?? false,
    score,
    similarity,
    confidence,
    relevance,
    recency,
    usefulness,
    createdAt,
    rank,
    tokens,
    text,
    offsets,
    history: historyView,
    historySpans,
  };
}

const HISTORY_GAP_BYTES_PER_MESSAGE = 16;

/** The range of `history.source` holding every span, if the gaps are small; else null. */
function historyRange(history: HistoryBytesLike, fieldBytes: number): { start: number; end: number } | null {
  const sp = history.spans;
  const start = sp[0]!;
  let end = start;
  for (let j = 0; j < 4 * history.count; j += 2) {
    if (sp[j]! < end || sp[j + 1]! < sp[j]!) return null;
    end = sp[j + 1]!;
  }
  return end - start <= fieldBytes + HISTORY_GAP_BYTES_PER_MESSAGE * history.count ? { start, end } : null;
}

/** Ids and categories are short and almost always ASCII: a JS loop beats a native `write` here. */
function writeShort(bytes: Buffer, s: string, at: number): number {
  const n = s.length;
  if (n > 64) return at + bytes.write(s, at, 'utf8');
  for (let j = 0; j < n; j++) {
    const u = s.charCodeAt(j);
    if (u >= 0x80) return at + j + bytes.write(s.slice(j), at + j, 'utf8');
    bytes[at + j] = u;
  }
  return at + n;
}

export interface HistoryBytesLike {
  source: Uint8Array;
  /** Per message: role start, role end, content start, content end. */
  spans: Uint32Array;
  count: number;
  contentPending: boolean;
}
