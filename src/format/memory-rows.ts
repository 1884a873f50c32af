/**
 * The answer's `memories_used` rows as protobuf bytes, byte-equal to protobufjs's, written where the fields
 * already are so the main thread allocates no row objects (docs/design/wire.md).
 */

import { varintLength, writeVarint } from '../wire/varint.js';

export interface MemoryRowColumns {
  text: Uint8Array;
  /** Per candidate `i`: id at [3i, 3i+1), category at [3i+1, 3i+2) of `text`. */
  offsets: Uint32Array;
  score: Float64Array;
  similarity: Float64Array;
  confidence: Float64Array;
  /** The values the score used. */
  relevance: Float64Array;
  recency: Float64Array;
  usefulness: Float64Array;
  rank: Int32Array;
}

/** Answer order: `included`, then `budget`, then `filter`. */
export interface MemoryRowOrder {
  selected: Int32Array;
  excluded: Int32Array;
  /** Filtered in the CPU stage: first of the `filter` rows. */
  filtered?: Int32Array;
  /** Candidates [packCount, n) were filtered before the CPU stage. */
  packCount: number;
  costs: Int32Array;
}

const ROW_TAG = 0x22;
const F_ID = 0x0a;
const F_COMPOSITE = 0x15;
const F_RELEVANCE = 0x1d;
const F_RECENCY = 0x25;
const F_USEFULNESS = 0x2d;
const F_RANK = 0x30;
const F_CATEGORY = 0x3a;
const F_EXCLUSION = 0x42;
const F_SIMILARITY = 0x4d;
const F_CONFIDENCE = 0x55;
const F_TOKENS = 0x58;
const FIXED_BYTES = 11 + 6 * 4;

const EXCLUSION_BYTES = {
  included: Buffer.from('included'),
  budget: Buffer.from('budget'),
  filter: Buffer.from('filter'),
  failed: Buffer.from('failed'),
} as const;

type RowKind = keyof typeof EXCLUSION_BYTES;

/** Negative int32 values are sign-extended to 64 bits, 10 bytes. */
function int32Bytes(v: number): number {
  return v < 0 ? 10 : varintLength(v);
}

function writeInt32(out: Uint8Array, at: number, v: number): number {
  if (v >= 0) return writeVarint(out, at, v);
  let i = at;
  let lo = v >>> 0;
  for (let k = 0; k < 4; k++) {
    out[i++] = (lo & 0x7f) | 0x80;
    lo >>>= 7;
  }
  out[i++] = (lo & 0x0f) | 0x70 | 0x80;
  for (let k = 0; k < 4; k++) out[i++] = 0xff;
  out[i++] = 0x01;
  return i;
}

/**
 * Repeated field 4 of AssembleContextResponse, in a buffer of its own (transferable).
 * @throws RangeError when an index points outside the columns.
 */
export function encodeMemoryRows(cols: MemoryRowColumns, order: MemoryRowOrder): Uint8Array {
  const n = cols.score.length;
  const rows: number[] = [];
  const kinds: RowKind[] = [];
  const add = (i: number, kind: RowKind) => {
    rows.push(i);
    kinds.push(kind);
  };
  for (const i of order.selected) add(i, 'included');
  for (const i of order.excluded) add(i, 'budget');
  for (const i of order.filtered ?? []) add(i, 'filter');
  for (let i = order.packCount; i < n; i++) add(i, 'filter');
  return writeRows(cols, rows, kinds, order.costs);
}

export interface RowFields {
  memory_id: string;
  category: string;
  score: number;
  similarity: number;
  confidence: number;
  /** Absent: relevance = similarity, the others 0. */
  relevance?: number;
  recency?: number;
  usefulness?: number;
  rank: number;
}

/**
 * The degraded answer's rows (contract.md §10): `included`/`budget` rows for `selection` when given, then
 * `failed` for the candidates not read and `filter` for the cut ones; token_estimate 0 without a cost.
 */
export function encodeDegradedRows(
  kept: readonly RowFields[],
  filtered: readonly RowFields[],
  selection?: {
    included: readonly number[];
    excluded: readonly number[];
    costs: Int32Array;
  },
): Uint8Array {
  const n = kept.length + filtered.length;
  const at = (i: number) => (i < kept.length ? kept[i]! : filtered[i - kept.length]!);
  let units = 0;
  for (let i = 0; i < n; i++) units += at(i).memory_id.length + at(i).category.length;
  const text = Buffer.allocUnsafe(3 * units);
  const cols: MemoryRowColumns = {
    text,
    offsets: new Uint32Array(3 * n + 1),
    score: new Float64Array(n),
    similarity: new Float64Array(n),
    confidence: new Float64Array(n),
    relevance: new Float64Array(n),
    recency: new Float64Array(n),
    usefulness: new Float64Array(n),
    rank: new Int32Array(n),
  };
  let end = 0;
  for (let i = 0; i < n; i++) {
    const c = at(i);
    cols.offsets[3 * i] = end;
    end += text.write(c.memory_id, end, 'utf8');
    cols.offsets[3 * i + 1] = end;
    end += text.write(c.category, end, 'utf8');
    cols.offsets[3 * i + 2] = end;
    cols.score[i] = c.score;
    cols.similarity[i] = c.similarity;
    cols.confidence[i] = c.confidence;
    // NaN (not yet measured) counts as 0.
    const relevance = c.relevance ?? c.similarity;
    cols.relevance[i] = Number.isNaN(relevance) ? 0 : relevance;
    cols.recency[i] = c.recency ?? 0;
    cols.usefulness[i] = c.usefulness ?? 0;
    cols.rank[i] = c.rank;
  }
  cols.offsets[3 * n] = end;
  const costs = new Int32Array(n);
  const rows: number[] = [];
  const kinds: RowKind[] = [];
  const row = (i: number, kind: RowKind) => {
    rows.push(i);
    kinds.push(kind);
  };
  if (selection) {
    costs.set(selection.costs.subarray(0, kept.length));
    const placed = new Uint8Array(kept.length);
    for (const i of selection.included) {
      row(i, 'included');
      placed[i] = 1;
    }
    for (const i of selection.excluded) {
      row(i, 'budget');
      placed[i] = 1;
    }
    for (let i = 0; i < kept.length; i++) {
      if (!placed[i]) {
        row(i, 'failed');
        costs[i] = 0;
      }
    }
  } else {
    for (let i = 0; i < kept.length; i++) row(i, 'failed');
  }
  for (let i = kept.length; i < n; i++) row(i, 'filter');
  return writeRows(cols, rows, kinds, costs);
}

function writeRows(cols: MemoryRowColumns, rows: number[], kinds: RowKind[], costs: Int32Array): Uint8Array {
  const n = cols.score.length;
  const o = cols.offsets;
  const bodies = new Int32Array(rows.length);
  let total = 0;
  for (let r = 0; r < rows.length; r++) {
    const i = rows[r]!;
    if (!(i >= 0 && i < n)) throw new RangeError(`memory row index ${i} outside 0..${n - 1}`);
    const id = o[3 * i + 1]! - o[3 * i]!;
    const category = o[3 * i + 2]! - o[3 * i + 1]!;
    const exclusion = EXCLUSION_BYTES[kinds[r]!].length;
    const body =
      FIXED_BYTES +
      varintLength(id) +
      id +
      int32Bytes(cols.rank[i]!) +
      varintLength(category) +
      category +
      varintLength(exclusion) +
      exclusion +
      int32Bytes(costs[i]!);
    bodies[r] = body;
    total += 1 + varintLength(body) + body;
  }
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let at = 0;
  const float = (tag: number, v: number) => {
    out[at++] = tag;
    view.setFloat32(at, v, true);
    at += 4;
  };
  const bytes = (tag: number, src: Uint8Array, start: number, end: number) => {
    out[at++] = tag;
    at = writeVarint(out, at, end - start);
    out.set(src.subarray(start, end), at);
    at += end - start;
  };
  for (let r = 0; r < rows.length; r++) {
    const i = rows[r]!;
    out[at++] = ROW_TAG;
    at = writeVarint(out, at, bodies[r]!);
    bytes(F_ID, cols.text, o[3 * i]!, o[3 * i + 1]!);
    float(F_COMPOSITE, cols.score[i]!);
    float(F_RELEVANCE, cols.relevance[i]!);
    float(F_RECENCY, cols.recency[i]!);
    float(F_USEFULNESS, cols.usefulness[i]!);
    out[at++] = F_RANK;
    at = writeInt32(out, at, cols.rank[i]!);
    bytes(F_CATEGORY, cols.text, o[3 * i + 1]!, o[3 * i + 2]!);
    const exclusion = EXCLUSION_BYTES[kinds[r]!];
    bytes(F_EXCLUSION, exclusion, 0, exclusion.length);
    float(F_SIMILARITY, cols.similarity[i]!);
    float(F_CONFIDENCE, cols.confidence[i]!);
    out[at++] = F_TOKENS;
    at = writeInt32(out, at, costs[i]!);
  }
  return out;
}
