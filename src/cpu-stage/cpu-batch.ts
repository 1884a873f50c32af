/** The CPU task's batch (contract.md §1, §10): typed-array columns over one transferred ArrayBuffer. */
import type { TokenBudget } from '../budget/budget-calculator.js';
import type { ResolvedModel } from '../budget/catalog.js';
import type { MemoryRowColumns } from '../format/memory-rows.js';
import type { MemoryContent } from '../text/content-bytes.js';
import { type SplicedUtf8, splicedBuffers } from '../wire/spliced.js';

export interface CpuCandidate {
  memory_id: string;
  category: string;
  content: string;
  score: number;
  similarity: number;
  confidence: number;
  rank: number;
  /** Packer cost in tokens (the whole wrapped block in the assembly). */
  tokens: number;
}

/** A candidate as {@link encodeCandidates} takes it; absent `tokens` = 0 (the CPU stage costs it). */
export type CandidateFields = Omit<CpuCandidate, 'tokens' | 'content'> & {
  tokens?: number;
  /** NaN = measured lexically in the CPU stage; absent = `similarity` (interim_v1). */
  relevance?: number;
  recency?: number;
  usefulness?: number;
  /** Epoch ms; absent = unknown. */
  created_at_ms?: number;
  content: MemoryContent;
};

export interface CpuFilters {
  history: boolean;
  /** For candidates whose relevance is NaN; '' = relevance 0. */
  query: string;
  relevanceFloor: number;
  relevanceWeight: number;
  relevanceExponent?: number;
  maxMemories: number;
}

export interface CpuTaskScalars {
  budget: number;
  dpCellCeiling: number;
  maxConsecutiveSkips: number;
  nonce: string;
  directive: string | null;
  /** Ignored when `historyCount` > 0 (history then travels as bytes). */
  recentMessages: { role: string; content: string }[];
  toolSchemas: string[];
  historyCount?: number;
  historyContentPending?: boolean;
  /** When set, the CPU stage computes budget and block costs itself and packs under its usable_budget. */
  budgetModel?: ResolvedModel;
  nonceBytes?: number;
  availableTokens?: number;
  /** Candidates [0, packCount) are packed, the rest only costed; absent = all. */
  packCount?: number;
  /** Filters before packing (history repeat, lexical relevance floor, max_memories); absent = none. */
  filters?: CpuFilters;
  memoryDates?: boolean;
  /** Absolute deadline, epoch ms on the `monotonicNow()` clock, never `Date.now()` (contract.md §10). */
  deadline: number;
}

/**
 * What crosses to the worker. The {@link BATCH_COLUMNS} are transferred and so detached in the sender;
 * they must not be views on a Node Buffer pool slab. Field f (0 id, 1 category, 2 content) of candidate i
 * is `text[offsets[3i+f] .. offsets[3i+f+1])`.
 */
export interface CpuTaskInput extends CpuTaskScalars, MemoryRowColumns {
  createdAt: Float64Array;
  tokens: Int32Array;
  history: Uint8Array;
  /** 4 per message: role start, role end, content start, content end. */
  historySpans: Uint32Array;
}

export interface CpuPackRecord {
  path: 'dp' | 'greedy';
  greedy_reason: string | null;
  total_tokens: number;
  total_score: number;
  skipped_count: number;
  was_budget_reached: boolean;
  candidates_evaluated: number;
  /** n × (buckets + 1): the size that decided the path. */
  cells: number;
  source: string;
}

export interface CpuTaskOutput {
  /** contract.md §11 detail when the request is invalid; everything else is then empty. */
  invalid: string | null;
  budget: TokenBudget | null;
  costs: Int32Array;
  tokens_used: number | null;
  selected: Int32Array;
  excluded: Int32Array;
  filtered: Int32Array;
  /** '' with `budgetModel`: see `assembled_utf8`. */
  assembled_context: string;
  /** With `budgetModel`: the context as spliced UTF-8 (history spans transferred back); else null. */
  assembled_utf8: SplicedUtf8 | null;
  memories_included: number;
  /** `memories_used` rows as protobuf bytes (src/format/memory-rows.ts). */
  memory_rows: Uint8Array;
  pack: CpuPackRecord;
  /** Timings in µs. */
  budget_us: number;
  pack_us: number;
  format_us: number;
  run_us: number;
  /** Epoch ms, same clock as `deadline`. */
  started_at: number;
  /** 0 = main thread (inline). */
  thread_id: number;
}

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

/** Every typed array of a {@link CpuTaskInput}: what a dispatch transfers. */
export const BATCH_COLUMNS = [
  ...CANDIDATE_COLUMNS,
  'text',
  'offsets',
  'history',
  'historySpans',
] as const satisfies readonly TypedArrayKeys<CpuTaskInput>[];

export type BatchColumn = (typeof BATCH_COLUMNS)[number];

export type TypedArrayKeys<T> = {
  [K in keyof T]-?: NonNullable<T[K]> extends ArrayBufferView ? K : never;
}[keyof T];

export type ListsEveryColumn<T, Listed> = [Exclude<TypedArrayKeys<T>, Listed>] extends [never]
  ? true
  : Exclude<TypedArrayKeys<T>, Listed>;

/** A typed array missing from {@link BATCH_COLUMNS} fails the build: it would be cloned, not transferred. */
export type EveryBatchColumnListed = Assert<ListsEveryColumn<CpuTaskInput, BatchColumn>>;
type Assert<T extends true> = T;

/** SharedArrayBuffers are already shared and cannot be transferred. */
function buffersOf(views: readonly { buffer: ArrayBufferLike }[]): ArrayBuffer[] {
  const out: ArrayBuffer[] = [];
  for (const v of views) {
    const b = v.buffer;
    // Listing a buffer twice is a DataCloneError.
    if (b instanceof ArrayBuffer && !out.includes(b)) out.push(b);
  }
  return out;
}

export function transferList(input: CpuTaskInput): ArrayBuffer[] {
  const views: ArrayBufferView[] = [];
  for (const name of BATCH_COLUMNS) views.push(input[name]);
  return buffersOf(views);
}

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

/** @throws TypeError naming the first inconsistent field (a detached batch has zero-length arrays). */
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
