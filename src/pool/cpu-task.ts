/**
 * The CPU stage of one assembly (SPEC §1, §8, §9, §10): pack + format, as one task.
 *
 * Pure: the same code runs inline and in a pool worker (`workers/cpu-worker.ts`). Candidates cross the
 * thread boundary as typed arrays over ArrayBuffers that are *transferred*, never cloned: numeric columns,
 * plus one UTF-8 byte array holding every id, category and content with a Uint32Array of byte offsets.
 * Only the small scalars (budget, nonce, directive, history, tool schemas, deadline) are cloned.
 */
import { threadId } from 'node:worker_threads';
import { type FormatMemory, formatContext } from '../format/formatter.js';
import { pack } from '../pack/packer.js';

/** One candidate as the assembly hands it to the CPU stage. */
export interface CpuCandidate {
  memory_id: string;
  category: string;
  /** Untrusted memory text. */
  content: string;
  /** Interim score (SPEC §7), the packer's value. */
  score: number;
  similarity: number;
  confidence: number;
  rank: number;
  /** Packer cost in tokens: in the assembly, the whole wrapped block's cost (SPEC §6, §8 step 3). */
  tokens: number;
}

/** The small values that are cloned to the worker with each task. */
export interface CpuTaskScalars {
  /** Usable budget in tokens (SPEC §6). */
  budget: number;
  /** DP table ceiling in cells (SPEC §3, §8 step 4). */
  dpCellCeiling: number;
  /** Greedy fallback's consecutive-skip limit (SPEC §3). */
  maxConsecutiveSkips: number;
  /** This assembly's nonce (SPEC §9). */
  nonce: string;
  directive: string | null;
  recentMessages: { role: string; content: string }[];
  toolSchemas: string[];
  /**
   * Absolute deadline of the CPU stage in ms on the epoch clock `performance.timeOrigin + performance.now()`
   * (the clock of `monotonicNow()`); never `Date.now()`. The round-trip must be over by then (SPEC §10).
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
  rank: Int32Array;
  tokens: Int32Array;
  /** UTF-8 of every candidate's id, category and content, in that order, concatenated. */
  text: Uint8Array;
  /** 3n+1 byte offsets into `text`: field f (0 id, 1 category, 2 content) of candidate i is [o[3i+f], o[3i+f+1]). */
  offsets: Uint32Array;
}

/** Pack record of one task: the packer's result without the index arrays (SPEC §8 step 9). */
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
  /** Candidate indices (into the input columns) in packed (canonical) order. */
  selected: Int32Array;
  /** Unselected candidate indices in canonical order (exclusion `budget`). */
  excluded: Int32Array;
  assembled_context: string;
  memories_included: number;
  pack: CpuPackRecord;
  /** Packer time, µs. */
  pack_us: number;
  /** Decoding the selected memories + formatter, µs. */
  format_us: number;
  /** Whole task in the worker (validation, id decode, pack, format), µs. */
  run_us: number;
  /** When the task began, epoch ms (same clock as `deadline`), for queue-wait accounting. */
  started_at: number;
  /** Thread that ran it (0 = main thread, i.e. inline). */
  thread_id: number;
}

const epochNow = (): number => performance.timeOrigin + performance.now();

const F64 = Float64Array.BYTES_PER_ELEMENT;
const I32 = Int32Array.BYTES_PER_ELEMENT;

/**
 * Encodes candidates into the typed-array batch of {@link CpuTaskInput}. All seven arrays are views on
 * one freshly allocated ArrayBuffer, so a dispatch transfers exactly one buffer.
 * @param candidates in any order (the packer sorts canonically); indices in the output refer to this order.
 * @param scalars everything else the task needs; `deadline` on the epoch clock.
 */
export function encodeCandidates(candidates: readonly CpuCandidate[], scalars: CpuTaskScalars): CpuTaskInput {
  const n = candidates.length;
  // One pass: room for the worst case (3 UTF-8 bytes per UTF-16 unit) instead of measuring every string
  // first, which doubled the main thread's encoding time. The slack rides along in the transfer, uncopied.
  let units = 0;
  for (const c of candidates) units += c.memory_id.length + c.category.length + c.content.length;
  // Layout keeps every view aligned: 3 float64 columns, 2 int32 columns, offsets, then the bytes.
  const numericBytes = 3 * n * F64 + 2 * n * I32 + (3 * n + 1) * I32;
  const buffer = new ArrayBuffer(numericBytes + 3 * units);
  const score = new Float64Array(buffer, 0, n);
  const similarity = new Float64Array(buffer, n * F64, n);
  const confidence = new Float64Array(buffer, 2 * n * F64, n);
  const rank = new Int32Array(buffer, 3 * n * F64, n);
  const tokens = new Int32Array(buffer, 3 * n * F64 + n * I32, n);
  const offsets = new Uint32Array(buffer, 3 * n * F64 + 2 * n * I32, 3 * n + 1);
  // A Buffer view (no copy) writes UTF-8 natively without a subarray per string.
  const bytes = Buffer.from(buffer, numericBytes, 3 * units);
  let at = 0;
  for (let i = 0; i < n; i++) {
    const c = candidates[i]!;
    score[i] = c.score;
    similarity[i] = c.similarity;
    confidence[i] = c.confidence;
    rank[i] = c.rank;
    tokens[i] = c.tokens;
    offsets[3 * i] = at;
    at += bytes.write(c.memory_id, at, 'utf8');
    offsets[3 * i + 1] = at;
    at += bytes.write(c.category, at, 'utf8');
    offsets[3 * i + 2] = at;
    at += bytes.write(c.content, at, 'utf8');
  }
  offsets[3 * n] = at;
  const text = new Uint8Array(buffer, numericBytes, at);
  return { ...scalars, score, similarity, confidence, rank, tokens, text, offsets };
}

/** Distinct transferable buffers of some views; SharedArrayBuffers are shared already and cannot be transferred. */
function buffersOf(views: readonly ArrayBufferView[]): ArrayBuffer[] {
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
    input.rank,
    input.tokens,
    input.text,
    input.offsets,
  ]);
}

/** The buffers to transfer back with a result. */
export function outputTransferList(output: CpuTaskOutput): ArrayBuffer[] {
  return buffersOf([output.selected, output.excluded]);
}

/**
 * Checks the batch's shape (a detached batch has zero-length arrays and fails here).
 * @throws TypeError naming the first inconsistent field.
 */
export function validateTaskInput(input: CpuTaskInput): void {
  const n = input.score.length;
  const columns = ['similarity', 'confidence', 'rank', 'tokens'] as const;
  for (const name of columns) {
    if (input[name].length !== n)
      throw new TypeError(`CpuTaskInput.${name} has ${input[name].length} entries, expected ${n}`);
  }
  const o = input.offsets;
  if (o.length !== 3 * n + 1) {
    throw new TypeError(
      `CpuTaskInput.offsets has ${o.length} entries, expected ${3 * n + 1} (detached batch?)`,
    );
  }
  if (o[3 * n]! > input.text.length) throw new TypeError('CpuTaskInput.offsets point past the end of text');
  for (let k = 0; k < 3 * n; k++) {
    if (o[k]! > o[k + 1]!) throw new TypeError(`CpuTaskInput.offsets are not ascending at ${k}`);
  }
}

/**
 * Time the worker keeps, beyond formatting, once the DP stops (ms): greedy, decoding, the return message
 * and the calling thread getting round to it.
 */
const FIXED_RESERVE_MS = 1;
/**
 * Formatter cost model in "units": one per content byte plus this many per escaped character. Escaping
 * runs a replace callback per `&`, `<`, `>` (≈ 100–300 ns each against ≈ 1.5 ns per plain byte), so
 * markup density, not size alone, decides the cost: 400 KB of plain text formats in under 1 ms, of
 * markup-heavy text in 7 ms and more.
 */
const ESCAPE_UNITS = 128;
/** Starting estimate, ns per unit; refined from real tasks on this thread. */
const DEFAULT_FORMAT_NS_PER_UNIT = 2.5;
/** Only tasks formatting at least this many units refine the estimate (smaller ones are noise). */
const CALIBRATE_MIN_UNITS = 64 * 1024;
let formatNsPerUnit = DEFAULT_FORMAT_NS_PER_UNIT;

/** Bytes of each content scanned for markup; longer contents are extrapolated from that prefix. */
const SAMPLE_BYTES = 256;
/** 1 for the bytes the escaper rewrites (`&`, `<`, `>`), 0 otherwise: a branch-free count. */
const ESCAPED = new Uint8Array(256);
ESCAPED[0x26] = ESCAPED[0x3c] = ESCAPED[0x3e] = 1;

/**
 * Estimated formatter cost units of the bytes in [from, to) (see {@link ESCAPE_UNITS}). Counting costs
 * about as much per byte as escaping plain text, so only a prefix is counted: the estimate stays cheap for
 * large batches and is exact for the usual short memories.
 */
function formatUnits(bytes: Uint8Array, from: number, to: number): number {
  const length = to - from;
  const end = Math.min(to, from + SAMPLE_BYTES);
  let escapes = 0;
  // & < > are ASCII; no byte of a multi-byte UTF-8 sequence is below 0x80, so bytes count characters.
  for (let k = from; k < end; k++) escapes += ESCAPED[bytes[k]!]!;
  return length + (ESCAPE_UNITS * escapes * length) / Math.max(1, end - from);
}

/**
 * Milliseconds before the deadline at which the DP must give up so that greedy + format + return still
 * land by it: {@link FIXED_RESERVE_MS} plus the formatter's estimated cost if every candidate were
 * selected (the worst case; the selection is not known before packing).
 * @param units formatter cost units of all candidates' contents (bytes + 128 × escaped characters).
 */
export function deadlineReserveMs(units: number): number {
  return FIXED_RESERVE_MS + (units * formatNsPerUnit) / 1e6;
}

/**
 * Pack + format of one assembly: the packer over all candidates (SPEC §8), then the formatter over the
 * selected ones in packed order (SPEC §9). The packer gets `deadline − deadlineReserveMs(…)` and finishes
 * on the greedy path (`greedy_reason: 'deadline'`) once that passes.
 * @throws TypeError for a malformed or detached batch; IbexError `IBEX_ERR_BUDGET_EXCEEDED` on a packer
 *   invariant breach (impossible by construction).
 */
export function runCpuTask(input: CpuTaskInput): CpuTaskOutput {
  const t0 = performance.now();
  const startedAt = performance.timeOrigin + t0;
  validateTaskInput(input);
  const n = input.score.length;
  const o = input.offsets;
  const text = input.text;
  const bytes = Buffer.from(text.buffer, text.byteOffset, text.byteLength);
  const ids: string[] = new Array(n);
  const units = new Float64Array(n);
  let totalUnits = 0;
  for (let i = 0; i < n; i++) {
    ids[i] = bytes.toString('utf8', o[3 * i], o[3 * i + 1]);
    units[i] = formatUnits(text, o[3 * i + 2]!, o[3 * i + 3]!);
    totalUnits += units[i]!;
  }
  const t1 = performance.now();
  const r = pack({
    ids,
    scores: input.score,
    tokens: input.tokens,
    budget: input.budget,
    dpCellCeiling: input.dpCellCeiling,
    maxConsecutiveSkips: input.maxConsecutiveSkips,
    deadline: input.deadline - deadlineReserveMs(totalUnits),
  });
  const t2 = performance.now();
  const memories: FormatMemory[] = new Array(r.selected.length);
  let selectedUnits = 0;
  for (let k = 0; k < r.selected.length; k++) {
    const i = r.selected[k]!;
    selectedUnits += units[i]!;
    memories[k] = {
      memory_id: ids[i]!,
      category: bytes.toString('utf8', o[3 * i + 1], o[3 * i + 2]),
      content: bytes.toString('utf8', o[3 * i + 2], o[3 * i + 3]),
    };
  }
  const formatted = formatContext({
    directive: input.directive,
    recentMessages: input.recentMessages,
    memories,
    toolSchemas: input.toolSchemas,
    nonce: input.nonce,
  });
  const t3 = performance.now();
  if (selectedUnits >= CALIBRATE_MIN_UNITS) {
    // EWMA keeps the reserve tracking this thread's real speed (JIT state, CPU) without one outlier ruling it.
    formatNsPerUnit = 0.8 * formatNsPerUnit + 0.2 * (((t3 - t2) * 1e6) / selectedUnits);
  }
  return {
    selected: r.selected,
    excluded: r.excluded,
    assembled_context: formatted.assembled_context,
    memories_included: formatted.memories_included,
    pack: {
      path: r.path,
      greedy_reason: r.greedy_reason,
      total_tokens: r.total_tokens,
      total_score: r.total_score,
      skipped_count: r.skipped_count,
      was_budget_reached: r.was_budget_reached,
      candidates_evaluated: r.candidates_evaluated,
      cells: r.cells,
      source: r.source,
    },
    pack_us: (t2 - t1) * 1000,
    format_us: (t3 - t2) * 1000,
    run_us: (t3 - t0) * 1000,
    started_at: startedAt,
    thread_id: threadId,
  };
}

const WARM_CATEGORIES = ['procedural', 'factual', 'preference', 'behavioral', 'episodic', 'notes'];

/**
 * A deterministic batch for warm-up: `n` candidates of about `chars` characters (markup included, so the
 * escaper's slow path is exercised), far deadline.
 */
export function warmupInput(n: number, chars: number, budget: number, dpCellCeiling = 437_570): CpuTaskInput {
  const candidates: CpuCandidate[] = [];
  for (let i = 0; i < n; i++) {
    const body = `warm-up memory ${i} <b>&amp; "quoted" text</b> `.repeat(Math.max(1, Math.ceil(chars / 40)));
    const content = body.slice(0, chars + (i % 7) * 3);
    candidates.push({
      memory_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      category: WARM_CATEGORIES[i % WARM_CATEGORIES.length]!,
      content,
      score: ((i * 7919) % 1000) / 1000,
      similarity: ((i * 104729) % 1000) / 1000,
      confidence: 0.5,
      rank: i + 1,
      tokens: Math.ceil(content.length / 4) + 40,
    });
  }
  return encodeCandidates(candidates, {
    budget,
    dpCellCeiling,
    maxConsecutiveSkips: 5,
    nonce: 'warm-up-nonce',
    directive: 'Be helpful.',
    recentMessages: [{ role: 'user', content: 'hello' }],
    toolSchemas: [],
    deadline: epochNow() + 60_000,
  });
}

/**
 * JIT-warms this thread's packer and formatter with real tasks (DP path with refinement, greedy path,
 * formatter over ~64 KB) and seeds the format-cost estimate. A few tens of ms; run once per worker at load.
 */
export function warmCpuTask(rounds = 40): void {
  for (let r = 0; r < rounds; r++) {
    runCpuTask(warmupInput(30, 400, 2400)); // DP, bucket refinement, swaps
    runCpuTask(warmupInput(30, 400, 120_000)); // all fit
    if (r % 8 === 0) runCpuTask(warmupInput(200, 300, 100_000, 100)); // greedy (ceiling), ~60 KB formatted
  }
}
