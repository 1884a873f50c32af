/**
 * The embedded store's cold search run by the CPU task itself (`IBEX_CONTEXT_SEARCH_IN_CPU_TASK`, issue 10):
 * one thread round-trip per call instead of two (store read, then CPU task). The pool thread searches on its
 * own read-only connection, validates and scopes the hits (SPEC §4.1, the same `validateHits` as the
 * store-read thread), merges them with the hot candidates the main thread encoded, in the order and with the
 * rules of the main thread's ranking (SPEC §7: `dedupeAndScore(hot, cold)`, then the `max_memories` cut), and
 * runs the CPU stage on that batch: the same answer, byte for byte, as when the store-read thread searched.
 *
 * Runs in pool threads only (it opens SQLite): the main thread never imports it.
 */
import { applyMaxMemories, dedupeAndScore } from '../ranking/score.js';
import { EmbeddedStore } from '../retrieval/embedded-store.js';
import {
  DEFAULT_MAX_MEMORY_CHARS,
  droppedDetail,
  SEARCH_LIMIT,
  validateHits,
} from '../retrieval/validate.js';
import type { MemoryHit } from '../types.js';
import { monotonicNow } from '../util/clock.js';
import { type CpuTaskInput, encodeCandidates, type TaskSearchOutcome } from './cpu-batch.js';

/** One read-only connection per database file per thread, opened on first use. */
const stores = new Map<string, EmbeddedStore>();

function storeFor(db: string): EmbeddedStore {
  let store = stores.get(db);
  if (!store) {
    // No read cache: every search must see every commit, as the store-read thread's do.
    store = EmbeddedStore.open(db, { cache: false });
    stores.set(db, store);
  }
  return store;
}

/** The hot candidates of the batch, in its order, as the hits they were scored from (content as bytes). */
function hotHits(input: CpuTaskInput): MemoryHit[] {
  const n = input.score.length;
  const o = input.offsets;
  const text = input.text;
  const bytes = Buffer.from(text.buffer, text.byteOffset, text.byteLength);
  const hits: MemoryHit[] = [];
  for (let i = 0; i < n; i++) {
    hits.push({
      memory_id: bytes.toString('utf8', o[3 * i]!, o[3 * i + 1]!),
      org_id: '',
      agent_id: '',
      content: text.subarray(o[3 * i + 2]!, o[3 * i + 3]!),
      category: bytes.toString('utf8', o[3 * i + 1]!, o[3 * i + 2]!),
      confidence: input.confidence[i]!,
      similarity: input.similarity[i]!,
      rank: input.rank[i]!,
      source: 'hot',
    });
  }
  return hits;
}

/** A failed search's detail, as the main thread's cold branch words it (sources.ts `storeFailure`). */
function failureDetail(err: unknown): string {
  const code = (err as { code?: unknown })?.code;
  return `embedded store unavailable (${typeof code === 'string' ? code : 'error'})`;
}

/**
 * Runs `input.search` and returns the batch to pack: the hot candidates of `input` (all of them, in the
 * main thread's dedupe order, `packCount` absent) merged with the validated cold hits and cut to
 * `max_memories`, every scalar and the history carried over; and the cold branch's outcome. A failed search
 * (SQLite error) leaves the hot candidates alone and is an `error` outcome (the answer is then L1).
 * @param clock ms on the monotonic clock (tests inject one).
 * @throws TypeError when `input` has no `search`.
 */
export function withTaskSearch(
  input: CpuTaskInput,
  clock: () => number = monotonicNow,
): { input: CpuTaskInput; cold: TaskSearchOutcome } {
  const search = input.search;
  if (search === undefined) throw new TypeError('CpuTaskInput.search is missing');
  const maxChars = search.maxChars ?? DEFAULT_MAX_MEMORY_CHARS;
  const start = clock();
  let cold: MemoryHit[] = [];
  let outcome: TaskSearchOutcome;
  try {
    const raw = storeFor(search.db).search(search.orgId, search.agentId, search.query, { maxChars });
    const v = validateHits(raw, search.orgId, search.agentId, { limit: SEARCH_LIMIT, maxChars });
    cold = v.hits;
    outcome = {
      status: 'success',
      latency_ms: clock() - start,
      detail: droppedDetail(v.invalid, v.foreign, v.oversize, v.ignored),
      dropped: { invalid: v.invalid, foreign: v.foreign },
      bounded: { oversize: v.oversize, ignored: v.ignored },
    };
  } catch (err) {
    outcome = {
      status: 'error',
      latency_ms: clock() - start,
      detail: failureDetail(err),
      dropped: { invalid: 0, foreign: 0 },
      bounded: { oversize: 0, ignored: 0 },
    };
  }
  const { kept, filtered } = applyMaxMemories(dedupeAndScore(hotHits(input), cold), search.maxMemories);
  const merged = encodeCandidates(
    filtered.length === 0 ? kept : kept.concat(filtered),
    {
      budget: input.budget,
      dpCellCeiling: input.dpCellCeiling,
      maxConsecutiveSkips: input.maxConsecutiveSkips,
      nonce: input.nonce,
      directive: input.directive,
      recentMessages: input.recentMessages,
      toolSchemas: input.toolSchemas,
      deadline: input.deadline,
      budgetModel: input.budgetModel,
      nonceBytes: input.nonceBytes,
      availableTokens: input.availableTokens,
      packCount: kept.length,
    },
    {
      source: input.history,
      spans: input.historySpans,
      count: input.historyCount ?? 0,
      contentPending: input.historyContentPending ?? false,
    },
  );
  return { input: merged, cold: outcome };
}
