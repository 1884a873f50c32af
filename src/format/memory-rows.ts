/**
 * The answer's `memories_used` rows (contract.md §2 MemoryUsed) as protobuf bytes, written by the CPU stage
 *. The main thread used to build one object per scored candidate and have protobufjs turn
 * each into a message object and a chain of writer ops: a third of everything the event loop allocated
 * per call (V8 sampling heap profiler on the service under `bench:load` at 500 req/s: ~57 of ~180 KB),
 * so more scavenges and longer ones under load. The worker already holds every field (ids and categories as UTF-8, scores, ranks, costs)
 * and knows each row's exclusion, so it writes the repeated field 4 once and the main thread only
 * appends those bytes to the rest of the message (src/wire/proto.ts).
 *
 * The bytes equal protobufjs's for the same rows: every field in field-number order, written even when
 * zero or empty (proto-loader's `fromObject` sets each field, and protobufjs writes what is set), floats
 * as little-endian float32, int32 as varints (a negative one sign-extended to 10 bytes).
 * `test/format/memory-rows.test.ts` checks this against the loader for arbitrary rows.
 *
 * Pure: runs in the pool worker and on the main thread.
 */

import { varintLength, writeVarint } from '../wire/varint.js';

/** One row's columns as the CPU stage holds them (the task's transferred candidate columns). */
export interface MemoryRowColumns {
  /** UTF-8 bytes of every id, category and content. */
  text: Uint8Array;
  /** Per candidate `i`: id at [3i, 3i+1), category at [3i+1, 3i+2) of `text`. */
  offsets: Uint32Array;
  /** Interim score (contract.md §7): `composite_score`. */
  score: Float64Array;
  /** `similarity` (contract.md §2). */
  similarity: Float64Array;
  confidence: Float64Array;
  /** `relevance_score`, `recency_score`, `usefulness_score`: the values the score used. */
  relevance: Float64Array;
  recency: Float64Array;
  usefulness: Float64Array;
  rank: Int32Array;
}

/** Which candidates become which rows, in answer order: `included`, then `budget`, then `filter`. */
export interface MemoryRowOrder {
  /** Packed candidates, packed order (exclusion `included`). */
  selected: Int32Array;
  /** Unpacked candidates among the packed ones, canonical order (exclusion `budget`). */
  excluded: Int32Array;
  /** Candidates of [0, packCount) filtered in the CPU stage, written first of the `filter` rows. */
  filtered?: Int32Array;
  /** Candidates [packCount, n) were filtered before the CPU stage (exclusion `filter`). */
  packCount: number;
  /** Each candidate's packer cost in tokens (`token_estimate`). */
  costs: Int32Array;
}

/** `AssembleContextResponse.memories_used` = field 4, length-delimited. */
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
/** Tags (11, one byte each) and six float32 values. */
const FIXED_BYTES = 11 + 6 * 4;

const EXCLUSION_BYTES = {
  included: Buffer.from('included'),
  budget: Buffer.from('budget'),
  filter: Buffer.from('filter'),
  failed: Buffer.from('failed'),
} as const;

/** A row's `exclusion` (contract.md §2 MemoryUsed). */
type RowKind = keyof typeof EXCLUSION_BYTES;

/** Bytes of an int32 field's value: negative ones are sign-extended to 64 bits, 10 bytes. */
function int32Bytes(v: number): number {
  return v < 0 ? 10 : varintLength(v);
}

function writeInt32(out: Uint8Array, at: number, v: number): number {
  if (v >= 0) return writeVarint(out, at, v);
  // Two's complement over 64 bits: the low 32 bits as 5 groups' worth, then all-ones.
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
 * The repeated field 4 of AssembleContextResponse for the candidates of `cols`, in answer order
 * (`included` rows in packed order, `budget` rows, `filter` rows).
 * @returns the bytes, in a buffer of their own (transferable).
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

/** The fields of a scored candidate that its row shows. */
export interface RowFields {
  memory_id: string;
  category: string;
  score: number;
  similarity: number;
  confidence: number;
  /** The score's inputs (`composite_v1`); absent: relevance = similarity, the others 0. */
  relevance?: number;
  recency?: number;
  usefulness?: number;
  rank: number;
}

/**
 * The degraded answer's rows (contract.md §10, src/request/answers.ts): without `kept`'s selection, `failed`
 * for the candidates within `max_memories`, then `filter` for the cut ones, token_estimate 0 (the CPU
 * stage that costs them did not run). With it (the L1 answer that keeps memories): `included` rows in
 * selection order and `budget` rows with their costs, then `failed` for the candidates not read, then
 * `filter`. Written from the scored candidates on the main thread: protobufjs's row objects and writer ops
 * were the largest allocation of a degraded call (~19 KB; V8 sampling heap profiler on the service under
 * `bench:load` at 1,000 req/s), and an overloaded process answers most calls this way.
 * @param selection indices into `kept` (included in order, then budget) and each kept candidate's cost.
 * @returns the repeated field 4 as bytes, the loader's for the same rows.
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
  // Worst case 3 UTF-8 bytes per UTF-16 unit; only ids and categories, no content.
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
    // A relevance still to be measured in the CPU stage (NaN) was not measured: 0.
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

/** Writes `rows` (candidate indices into `cols`) with their exclusions and costs, in that order. */
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
