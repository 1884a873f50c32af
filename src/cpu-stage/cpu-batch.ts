/**
 * The CPU task's batch (contract.md §1, §10): what crosses the thread boundary and how. Candidates travel as typed
 * arrays over one ArrayBuffer that is *transferred*, never cloned: numeric columns, plus one UTF-8 byte
 * array holding every id, category and content, with a Uint32Array of byte offsets. History
 * travels as bytes too: a large request's own buffer is transferred as it is (no copy on the main thread),
 * a small history is copied into the candidates' buffer. Only small scalars are cloned.
 */
import type { TokenBudget } from '../budget/budget-calculator.js';
import type { ResolvedModel } from '../budget/catalog.js';
import type { MemoryRowColumns } from '../format/memory-rows.js';
import type { MemoryContent } from '../text/content-bytes.js';
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
 * What crosses to the worker. The typed arrays ({@link BATCH_COLUMNS}) are transferred (see {@link transferList}):
 * after dispatch they are detached in the sender. They may be views on one shared-by-them ArrayBuffer
 * (`encodeCandidates` in src/cpu-stage/cpu-batch-encode.ts builds exactly that); they must not be views on a
 * Node Buffer pool slab.
 *
 * The columns the answer's rows are written from are {@link MemoryRowColumns}: `relevance` is NaN for a
 * candidate whose relevance the CPU stage measures lexically (see `filters`); `text` holds every candidate's
 * id, category and content, in that order, concatenated, and `offsets` the 3n+1 byte offsets into it: field
 * f (0 id, 1 category, 2 content) of candidate i is [o[3i+f], o[3i+f+1]).
 */
export interface CpuTaskInput extends CpuTaskScalars, MemoryRowColumns {
  /** `memory.created_at`, epoch ms; NaN = unknown. */
  createdAt: Float64Array;
  tokens: Int32Array;
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

/** The columns with one entry per candidate, in the order of the batch's layout. */
export const CANDIDATE_COLUMNS = [
  'score',
  'similarity',
  'confidence',
  'relevance',
  'recency',
  'usefulness',
  'createdAt',
  'rank',
  'tokens',
] as const satisfies readonly TypedArrayKeys<CpuTaskInput>[];

/**
 * Every typed array of a {@link CpuTaskInput}: the one list of what a dispatch transfers ({@link transferList})
 * and what the pool moves into buffers of its own while a call waits (`takeOwnership`, src/pool/pool-call.ts).
 */
export const BATCH_COLUMNS = [
  ...CANDIDATE_COLUMNS,
  'text',
  'offsets',
  'history',
  'historySpans',
] as const satisfies readonly TypedArrayKeys<CpuTaskInput>[];

export type BatchColumn = (typeof BATCH_COLUMNS)[number];

/** The keys of `T` whose values are typed arrays (or other views on an ArrayBuffer). */
export type TypedArrayKeys<T> = {
  [K in keyof T]-?: NonNullable<T[K]> extends ArrayBufferView ? K : never;
}[keyof T];

/** `true` when `Listed` names every typed-array key of `T`; else the keys it leaves out. */
export type ListsEveryColumn<T, Listed> = [Exclude<TypedArrayKeys<T>, Listed>] extends [never]
  ? true
  : Exclude<TypedArrayKeys<T>, Listed>;

/**
 * A typed array added to CpuTaskInput but not to {@link BATCH_COLUMNS} fails the build here, naming the
 * column: it would otherwise be cloned instead of transferred, and left attached in the caller.
 */
export type EveryBatchColumnListed = Assert<ListsEveryColumn<CpuTaskInput, BatchColumn>>;
type Assert<T extends true> = T;

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
  const views: ArrayBufferView[] = [];
  for (const name of BATCH_COLUMNS) views.push(input[name]);
  return buffersOf(views);
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
  for (const name of CANDIDATE_COLUMNS) {
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
