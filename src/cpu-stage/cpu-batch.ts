/**
 * The CPU task's batch (contract.md §1, §10): what crosses the thread boundary and how. Candidates travel as typed
 * arrays over one ArrayBuffer that is *transferred*, never cloned: numeric columns, plus one UTF-8 byte
 * array holding every id, category and content, with a Uint32Array of byte offsets. History
 * travels as bytes too: a large request's own buffer is transferred as it is (no copy on the main thread),
 * a small history is copied into the candidates' buffer. Only small scalars are cloned.
 */
import type { TokenBudget } from '../budget/budget-calculator.js';
import type { ResolvedModel } from '../budget/catalog.js';
import type { MemoryContent } from '../text/content-bytes.js';
import { isPooledMessageView } from '../util/message-buffers.js';
import { type SplicedUtf8, splicedBuffers } from '../wire/spliced.js';

/** One candidate as the assembly hands it to the CPU stage. */
export interface CpuCandidate {
  memory_id: string;
  category: string;
  /** Untrusted memory text. */
  content: string;
  /** Interim score (contract.md §7), the packer's value. */
  score: number;
  similarity: number;
  confidence: number;
  rank: number;
  /** Packer cost in tokens: in the assembly, the whole wrapped block's cost (contract.md §6, §8 step 3). */
  tokens: number;
}

/**
 * A candidate as {@link encodeCandidates} takes it: `tokens` may be absent (0), as in the assembly, whose
 * CPU stage computes every cost itself; other fields (a scored candidate's) are ignored.
 */
export type CandidateFields = Omit<CpuCandidate, 'tokens' | 'content'> & {
  tokens?: number;
  /**
   * Query relevance the score used (`composite_v1`); NaN = to be measured lexically in the CPU stage
   * (a memory service's hot hit, see `query`); absent = `similarity` (interim_v1).
   */
  relevance?: number;
  /** Recency the score used; absent = 0 (interim_v1). */
  recency?: number;
  /** Usefulness the score used; absent = 0 (interim_v1). */
  usefulness?: number;
  /** `memory.created_at`, epoch ms (the date attribute); absent = unknown. */
  created_at_ms?: number;
  /** The text, or its UTF-8 bytes as a retrieval thread sent them (copied as they are). */
  content: MemoryContent;
};

/** What the CPU stage filters candidates [0, packCount) by (see {@link CpuTaskScalars.filters}). */
export interface CpuFilters {
  /** Drop memories whose text is already in the history (contract.md §7 "Already in the prompt"). */
  history: boolean;
  /** The request's query, for candidates whose relevance is NaN; '' = none (relevance 0). */
  query: string;
  /** The relevance floor for those candidates (0 when the search did not answer). */
  relevanceFloor: number;
  /** w_rel of the call: what a lexical relevance adds to the score. */
  relevanceWeight: number;
  /** The composite's relevance exponent: the score gains relevanceWeight × relevance ** it. Absent = 1. */
  relevanceExponent?: number;
  /** `max_memories` (0 = no cap). */
  maxMemories: number;
}

/** The small values that are cloned to the worker with each task. */
export interface CpuTaskScalars {
  /** Usable budget in tokens (contract.md §6). */
  budget: number;
  /** DP table ceiling in cells (contract.md §3, §8 step 4). */
  dpCellCeiling: number;
  /** Greedy fallback's consecutive-skip limit (contract.md §3). */
  maxConsecutiveSkips: number;
  /** This assembly's nonce (contract.md §9). */
  nonce: string;
  directive: string | null;
  /** History as strings; ignored when `historyCount` > 0 (history then travels as bytes, `history`). */
  recentMessages: { role: string; content: string }[];
  toolSchemas: string[];
  /**
   * Messages whose role and content bytes are in `history` (spans in `historySpans`). The assembly sends
   * history this way (bytes, not strings, on the main thread); 0 or absent = none.
   */
  historyCount?: number;
  /** Some history content may exceed 32,768 code points: the CPU stage decides (contract.md §11 message). */
  historyContentPending?: boolean;
  /**
   * When set, the CPU stage computes the TokenBudget (contract.md §6) from the directive, history and tool schemas,
   * each candidate's wrapped-block cost (overwriting `tokens`), packs under its usable_budget (ignoring
   * `budget`) and reports `tokens_used`. The assembly sets it; vectors and benches pass costs themselves.
   */
  budgetModel?: ResolvedModel;
  /** Nonce entropy in bytes for the budget's formatter overhead; with `budgetModel`. */
  nonceBytes?: number;
  /** The request's available_tokens (contract.md §6); with `budgetModel`. */
  availableTokens?: number;
  /**
   * Candidates [0, packCount) are packed; the rest are only costed (the `filter` rows of max_memories).
   * Absent = all.
   */
  packCount?: number;
  /**
   * The service's filters before packing, over candidates [0, packCount) (absent in vectors and
   * benches): a memory already in the history is `filter`; a candidate whose relevance is NaN gets the
   * lexical relevance of its content against `query` (its score gains `relevanceWeight` × it, and below
   * `relevanceFloor` it is `filter`); then `maxMemories` (0 = no cap) keeps the top by (score desc,
   * memory_id asc) and the rest are `filter`.
   */
  filters?: CpuFilters;
  /** Each packed memory's block carries its date (`memory.created_at`, ISO date) as an attribute. */
  memoryDates?: boolean;
  /**
   * Absolute deadline of the CPU stage in ms on the epoch clock `performance.timeOrigin + performance.now()`
   * (the clock of `monotonicNow()`); never `Date.now()`. The round-trip must be over by then (contract.md §10).
   */
  deadline: number;
}

/**
 * What crosses to the worker. The seven typed arrays are transferred (see {@link transferList}): after
 * dispatch they are detached in the sender. They may be views on one shared-by-them ArrayBuffer
 * ({@link encodeCandidates} builds exactly that); they must not be views on a Node Buffer pool slab.
 */
export interface CpuTaskInput extends CpuTaskScalars {
  score: Float64Array;
  similarity: Float64Array;
  confidence: Float64Array;
  /** Relevance the score used (NaN = measure lexically, see `filters`); the rows' `relevance_score`. */
  relevance: Float64Array;
  /** The rows' `recency_score`. */
  recency: Float64Array;
  /** The rows' `usefulness_score`. */
  usefulness: Float64Array;
  /** `memory.created_at`, epoch ms; NaN = unknown. */
  createdAt: Float64Array;
  rank: Int32Array;
  tokens: Int32Array;
  /** UTF-8 of every candidate's id, category and content, in that order, concatenated. */
  text: Uint8Array;
  /**
   * 3n+1 byte offsets into `text`: field f (0 id, 1 category, 2 content) of candidate i is
   * [o[3i+f], o[3i+f+1]).
   */
  offsets: Uint32Array;
  /**
   * History bytes: a view on the request's own buffer (transferred whole) or on the batch's buffer (copied
   * there); empty without history.
   */
  history: Uint8Array;
  /** 4 × historyCount offsets into `history`: role start, role end, content start, content end. */
  historySpans: Uint32Array;
}

/** Pack record of one task: the packer's result without the index arrays (contract.md §8 step 9). */
export interface CpuPackRecord {
  path: 'dp' | 'greedy';
  /** `cell_ceiling` or `deadline` on the greedy path; null on the DP path. */
  greedy_reason: string | null;
  total_tokens: number;
  total_score: number;
  skipped_count: number;
  was_budget_reached: boolean;
  candidates_evaluated: number;
  /** n × (buckets + 1) with 16-token buckets: the size that decided the path. */
  cells: number;
  /** Which answer won: `adr0069`, `refined`, `refill`, `greedy` or `trivial`. */
  source: string;
}

/** What comes back from the worker; `selected` and `excluded` are transferred. */
export interface CpuTaskOutput {
  /**
   * contract.md §11 detail when the CPU stage found the request invalid (a history content over 32,768 code
   * points that bytes could not decide); everything else is then empty.
   */
  invalid: string | null;
  /** The TokenBudget, when the task computed it (`budgetModel`); else null. */
  budget: TokenBudget | null;
  /** Each candidate's packer cost in tokens (wrapped block when `budgetModel`), input order; transferred. */
  costs: Int32Array;
  /** Estimate of `assembled_context` under the model's kind, when `budgetModel`; else null. */
  tokens_used: number | null;
  /** Candidate indices (into the input columns) in packed (canonical) order. */
  selected: Int32Array;
  /** Unselected candidate indices in canonical order (exclusion `budget`). */
  excluded: Int32Array;
  /** Candidates of [0, packCount) the CPU stage filtered (history, lexical floor, max_memories). */
  filtered: Int32Array;
  /** The formatted context; '' when the task computed the budget (`budgetModel`): see `assembled_utf8`. */
  assembled_context: string;
  /**
   * With `budgetModel`: the formatted context as spliced UTF-8 — the bytes the task wrote plus spans of the
   * history bytes, which come back transferred with it (a small answer copies them once,
   * into the gRPC frame; a large one is written from them as they are). Else null.
   */
  assembled_utf8: SplicedUtf8 | null;
  memories_included: number;
  /**
   * The answer's `memories_used` rows as protobuf bytes (repeated field 4 of AssembleContextResponse:
   * `included`, `budget`, then `filter` rows; src/format/memory-rows.ts); transferred. Empty when
   * `invalid` is set.
   */
  memory_rows: Uint8Array;
  pack: CpuPackRecord;
  /** Budget and wrapped-block costs, µs (0 without `budgetModel`). */
  budget_us: number;
  /** Packer time, µs. */
  pack_us: number;
  /** Formatter over the selected memories (escaped from their bytes under estimate kinds), µs. */
  format_us: number;
  /** Whole task in the worker (validation, id decode, pack, format), µs. */
  run_us: number;
  /** When the task began, epoch ms (same clock as `deadline`), for queue-wait accounting. */
  started_at: number;
  /** Thread that ran it (0 = main thread, i.e. inline). */
  thread_id: number;
}

const F64 = Float64Array.BYTES_PER_ELEMENT;
/** score, similarity, confidence, relevance, recency, usefulness, createdAt. */
const FLOAT_COLUMNS = 7;
const I32 = Int32Array.BYTES_PER_ELEMENT;

/** Histories from this many bytes on travel in the request's own buffer, when it has one (no copy). */
export const TRANSFER_HISTORY_FROM_BYTES = 64 * 1024;

/**
 * Whether `source` can be transferred as it is: it views (all but a gRPC frame header of) an ArrayBuffer
 * of its own, as grpc-js's decoder makes for every request message, and is large enough for a copy to
 * matter, or a message in a recycled buffer (src/util/message-buffers.ts), whose remaining bytes are zero.
 * A Buffer from Node's shared pool, or a slice of someone else's buffer, is copied instead.
 */
export function ownsItsBuffer(source: Uint8Array): boolean {
  return (
    source.byteLength >= TRANSFER_HISTORY_FROM_BYTES &&
    source.buffer instanceof ArrayBuffer &&
    (source.buffer.byteLength - source.byteLength <= 16 || isPooledMessageView(source))
  );
}

/**
 * Encodes candidates into the typed-array batch of {@link CpuTaskInput}. The arrays are views on one
 * freshly allocated ArrayBuffer, plus, for a history of {@link TRANSFER_HISTORY_FROM_BYTES} or more in a
 * request buffer of its own ({@link ownsItsBuffer}), that buffer: a dispatch transfers one or two buffers.
 * A transferred request buffer is detached in the sender until the pool hands it back (with the result,
 * or with `onReturned` when the task never ran).
 * @param candidates in any order (the packer sorts canonically); indices in the output refer to this order.
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
  // A small history whose fields sit close together in the request (the protobuf tags and lengths between
  // them) is copied as one range, gaps included, instead of a view and a copy per field. The gaps are the
  // same request's bytes, never spanned, so never in an answer; they count in the task's history bytes.
  const range = h > 0 && !transfer ? historyRange(history!, historyBytes) : null;
  if (range !== null) historyBytes = range.end - range.start;
  // One pass: room for the worst case (3 UTF-8 bytes per UTF-16 unit) instead of measuring every string
  // first, which doubled the main thread's encoding time. The slack rides along in the transfer, uncopied.
  // A content already in bytes (content-bytes.ts) needs exactly its length.
  let textRoom = 0;
  for (const c of candidates) {
    textRoom += 3 * (c.memory_id.length + c.category.length);
    textRoom += typeof c.content === 'string' ? 3 * c.content.length : c.content.byteLength;
  }
  // Layout keeps every view aligned: 7 float64 columns, 2 int32 columns, offsets, then the bytes.
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
  // A Buffer view (no copy) writes UTF-8 natively without a subarray per string.
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
  // Without history the (empty) view stays on the batch buffer: still one transfer.
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
    // A small history is copied once, after the candidates' text (a memcpy per field, no decoding).
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
  // Every scalar written out, not `...scalars`: V8 11 (Node 20) adds each property after a spread through
  // its runtime, ~1.5 µs apiece, and this literal cost the event loop ~16 µs per call that way (0.1 µs now).
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

/** Most bytes between a history's fields that {@link historyRange} copies along, per message. */
const HISTORY_GAP_BYTES_PER_MESSAGE = 16;

/**
 * The byte range [start, end) of `history.source` that holds every span, when copying it whole copies at
 * most {@link HISTORY_GAP_BYTES_PER_MESSAGE} per message more than the spans' `fieldBytes`; else null
 * (fields far apart or out of order, as a hand-made request may have them).
 */
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

/**
 * Writes `s` as UTF-8 at `at` of `bytes`, room assumed; @returns the end. Ids and categories are short
 * and almost always ASCII: a JS loop writes them in a fraction of a native `write` call's cost.
 */
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

/** History as byte spans (the shape of `HistoryBytes` in src/request/wire-request.ts). */
export interface HistoryBytesLike {
  source: Uint8Array;
  /** role start, role end, content start, content end per message. */
  spans: Uint32Array;
  count: number;
  contentPending: boolean;
}

/** Distinct transferable buffers of some views; SharedArrayBuffers are shared already and cannot be transferred. */
function buffersOf(views: readonly { buffer: ArrayBufferLike }[]): ArrayBuffer[] {
  const out: ArrayBuffer[] = [];
  for (const v of views) {
    const b = v.buffer;
    // A buffer listed twice is a DataCloneError, hence the dedupe.
    if (b instanceof ArrayBuffer && !out.includes(b)) out.push(b);
  }
  return out;
}

/** The buffers to transfer with a task (each once). */
export function transferList(input: CpuTaskInput): ArrayBuffer[] {
  return buffersOf([
    input.score,
    input.similarity,
    input.confidence,
    input.relevance,
    input.recency,
    input.usefulness,
    input.createdAt,
    input.rank,
    input.tokens,
    input.text,
    input.offsets,
    input.history,
    input.historySpans,
  ]);
}

/** The buffers to transfer back with a result (the history's among them, inside `assembled_utf8`). */
export function outputTransferList(output: CpuTaskOutput): ArrayBuffer[] {
  const spliced = output.assembled_utf8
    ? splicedBuffers(output.assembled_utf8).map((buffer) => ({ buffer }))
    : [];
  return buffersOf([
    output.selected,
    output.excluded,
    output.filtered,
    output.costs,
    output.memory_rows,
    ...spliced,
  ]);
}

/**
 * Checks the batch's shape (a detached batch has zero-length arrays and fails here).
 * @throws TypeError naming the first inconsistent field.
 */
export function validateTaskInput(input: CpuTaskInput): void {
  const n = input.score.length;
  const columns = [
    'similarity',
    'confidence',
    'relevance',
    'recency',
    'usefulness',
    'createdAt',
    'rank',
    'tokens',
  ] as const;
  for (const name of columns) {
    if (input[name].length !== n)
      throw new TypeError(`CpuTaskInput.${name} has ${input[name].length} entries, expected ${n}`);
  }
  const o = input.offsets;
  const entries = 3 * n + 1;
  if (o.length !== entries) {
    throw new TypeError(
      `CpuTaskInput.offsets has ${o.length} entries, expected ${entries} (detached batch?)`,
    );
  }
  if (o[entries - 1]! > input.text.length)
    throw new TypeError('CpuTaskInput.offsets point past the end of text');
  for (let k = 0; k < entries - 1; k++) {
    if (o[k]! > o[k + 1]!) throw new TypeError(`CpuTaskInput.offsets are not ascending at ${k}`);
  }
  const h = input.historyCount ?? 0;
  const sp = input.historySpans;
  if (sp.length !== 4 * h)
    throw new TypeError(
      `CpuTaskInput.historySpans has ${sp.length} entries, expected ${4 * h} (detached batch?)`,
    );
  for (let k = 0; k < 4 * h; k += 2) {
    if (sp[k]! > sp[k + 1]! || sp[k + 1]! > input.history.length)
      throw new TypeError(`CpuTaskInput.historySpans are out of range at ${k}`);
  }
}
