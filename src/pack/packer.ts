/**
 * The packer: 0/1 knapsack of candidates under the usable budget (contract.md §8, ADR-0069).
 *
 * The ADR-0069 algorithm (16-token buckets, floor weights, strict-improvement DP, repair, refill, local
 * improvement) always runs and decides the path. On the DP path the packer may then refine its answer as
 * contract.md §8 allows: first a branch-and-bound on exact token weights seeded with ADR-0069's answer (* bounded by a node limit and the deadline; when it completes the answer is optimal and nothing else
 * runs), else plain refill-from-empty and a second, finer table with rounded-up weights (so its selection
 * always fits exactly). A refinement wins only when strictly better, so the result is never below
 * ADR-0069's and equals it whenever ADR-0069 is already optimal.
 *
 * Everything runs on typed arrays with scratch buffers reused across calls: no per-cell allocation.
 */

import { compareCodePoints } from '../text/code-point-order.js';
import { monotonicNow } from '../util/clock.js';
import { Errors } from '../wire/errors.js';
import { sortIndices } from './index-sort.js';
import { DeadlineReached, knapsack } from './knapsack.js';
import { DEFAULT_SEARCH_NODE_LIMIT, improveBySearch } from './search.js';
import { greedy, improve, refill, repair, selectedScore, selectedTokens } from './steps.js';

/** DP capacity unit in tokens (ADR-0069). */
export const BUCKET_TOKENS = 16;

/**
 * Default ceiling of the refinement table (cells). Small budgets, where 16-token floor weights strand most
 * of the budget, get an exact or near-exact table well under it; large tables stay cheap (bench:pack).
 */
export const DEFAULT_REFINE_CELL_CEILING = 32_768;

/** Why the greedy path ran. */
export type GreedyReason = 'cell_ceiling' | 'deadline';

/** Packer input: one entry per candidate, in any order. */
export interface PackInput {
  /** memory_id per candidate (canonical tie-break, code-point order). */
  ids: readonly string[];
  /** Interim score per candidate (float64). */
  scores: Float64Array;
  /** Token cost per candidate (≥ 0): raw content estimate (vectors) or wrapped block cost (assembly). */
  tokens: Int32Array;
  /** Usable budget in tokens. */
  budget: number;
  /** Largest DP table in cells, n × (buckets + 1) (contract.md §3). */
  dpCellCeiling: number;
  /** Greedy fallback's consecutive-skip limit (contract.md §3). */
  maxConsecutiveSkips: number;
  /**
   * Absolute deadline on the epoch clock (`performance.timeOrigin + performance.now()`, ms). The DP checks
   * it between rows and finishes on the greedy path when it is nearly spent.
   */
  deadline?: number;
  /** How long before the deadline the DP gives up (ms); default 0.25. */
  deadlineMarginMs?: number;
  /**
   * Ceiling in cells of the refinement table; default min(dpCellCeiling, {@link DEFAULT_REFINE_CELL_CEILING}).
   * 0 disables refinement (ADR-0069 plus refill-from-empty only).
   */
  refineCellCeiling?: number;
  /**
   * Node limit of the exact-weight branch-and-bound that runs last on the DP path; default
   * {@link DEFAULT_SEARCH_NODE_LIMIT}. 0 disables it.
   */
  searchNodeLimit?: number;
  /**
   * Returns the ADR-0069 algorithm's answer alone (steps 1–9, no refinement): the reference that the
   * refined answer is never below. For benches and tests.
   */
  adr0069Only?: boolean;
}

/** Packer output (contract.md §8 step 9). */
export interface PackResult {
  /** Selected candidate indices (into the input arrays) in output order: canonical order. */
  selected: Int32Array;
  /** Indices of unselected candidates in canonical order (`budget` exclusion). */
  excluded: Int32Array;
  /** Exact token sum of the selection (≤ budget). */
  total_tokens: number;
  /** float64 sum of selected scores in output order. */
  total_score: number;
  skipped_count: number;
  was_budget_reached: boolean;
  path: 'dp' | 'greedy';
  /** Set when path is `greedy`. */
  greedy_reason: GreedyReason | null;
  candidates_evaluated: number;
  /** n × (buckets + 1) with 16-token buckets: the size that decided the path. */
  cells: number;
  buckets: number;
  /**
   * Which answer won on the DP path: `adr0069`, `refined` (finer table), `refill` (refill from empty) or
   * `search` (branch-and-bound); `greedy`/`trivial` otherwise.
   */
  source: 'adr0069' | 'refined' | 'refill' | 'search' | 'greedy' | 'trivial';
}

/** Canonical order of the input: score descending, then memory_id ascending (code points), then input index. */
export function canonicalOrder(ids: readonly string[], scores: Float64Array): Int32Array {
  const n = ids.length;
  const order = new Int32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  const before = (a: number, b: number): boolean => {
    const d = scores[a]! - scores[b]!;
    if (d !== 0) return d > 0;
    const c = compareCodePoints(ids[a]!, ids[b]!);
    return c !== 0 ? c < 0 : a < b;
  };
  return sortIndices(order, before, 64);
}

/**
 * Packs candidates under `budget` (contract.md §8, all nine steps).
 * @returns the selection in canonical order; `total_tokens ≤ budget` always.
 * @throws IbexError `IBEX_ERR_BUDGET_EXCEEDED` on an internal invariant breach, which must be impossible.
 */
export function pack(input: PackInput): PackResult {
  const n = input.ids.length;
  const budget = input.budget;
  const order = canonicalOrder(input.ids, input.scores);
  let sumTokens = 0;
  for (let i = 0; i < n; i++) sumTokens += input.tokens[i]!;
  const buckets = Math.max(1, Math.floor(budget / BUCKET_TOKENS));
  const cells = n * (buckets + 1);
  // All fit on the DP path: the DP would take every positive item and refill the rest, so no table.
  if (n > 0 && budget > 0 && cells <= input.dpCellCeiling && sumTokens <= budget) {
    let totalScore = 0;
    for (let k = 0; k < n; k++) totalScore += input.scores[order[k]!]!;
    return {
      selected: order,
      excluded: new Int32Array(0),
      total_tokens: sumTokens,
      total_score: totalScore,
      skipped_count: 0,
      was_budget_reached: false,
      path: 'dp',
      greedy_reason: null,
      candidates_evaluated: n,
      cells,
      buckets,
      source: 'adr0069',
    };
  }
  const tokens = new Int32Array(n);
  const values = new Float64Array(n);
  const ids: string[] = new Array(n);
  for (let k = 0; k < n; k++) {
    const i = order[k]!;
    tokens[k] = input.tokens[i]!;
    values[k] = input.scores[i]!;
    ids[k] = input.ids[i]!;
  }
  const sel = new Uint8Array(n);
  const finish = (path: 'dp' | 'greedy', reason: GreedyReason | null, source: PackResult['source']) =>
    buildResult(sel, order, tokens, values, budget, path, reason, source, cells, buckets);

  if (n === 0) return finish('dp', null, 'trivial');
  if (budget <= 0) return finish('dp', null, 'trivial');

  const deadline = input.deadline ?? Number.POSITIVE_INFINITY;
  const margin = input.deadlineMarginMs ?? 0.25;
  const greedyPath = (reason: GreedyReason) => {
    greedy(sel, tokens, budget, input.maxConsecutiveSkips);
    return finish('greedy', reason, 'greedy');
  };
  if (cells > input.dpCellCeiling) return greedyPath('cell_ceiling');

  try {
    // ADR-0069: floor weights in 16-token buckets, then repair, refill, improve.
    const weights = new Int32Array(n);
    for (let k = 0; k < n; k++) {
      const t = tokens[k]!;
      weights[k] = t === 0 ? 0 : Math.max(1, Math.floor(t / BUCKET_TOKENS));
    }
    const stopAt = deadline - margin;
    knapsack(weights, values, buckets, sel, stopAt);
    let total = repair(sel, tokens, values, ids, budget);
    total = refill(sel, tokens, budget, total);
    improve(sel, tokens, values, budget, total, stopAt);
    if (input.adr0069Only) return finish('dp', null, 'adr0069');
    let bestScore = selectedScore(sel, values);
    let source: PackResult['source'] = 'adr0069';

    const consider = (candidate: Uint8Array, from: PackResult['source']) => {
      const score = selectedScore(candidate, values);
      // Strictly better by more than float noise, so equal answers keep ADR-0069's selection.
      if (score > bestScore + 1e-9) {
        sel.set(candidate);
        bestScore = score;
        source = from;
      }
    };

    // Refinements only ever replace ADR-0069's answer with a better one; out of time, they are skipped.
    const alt = new Uint8Array(n);
    // First the exact-weight branch-and-bound seeded with ADR-0069's answer: when it explores its whole
    // tree the answer is optimal and the table refinements below cannot beat it, so they are skipped.
    const nodeLimit = input.searchNodeLimit ?? DEFAULT_SEARCH_NODE_LIMIT;
    if (nodeLimit > 0 && monotonicNow() < stopAt) {
      alt.set(sel);
      const outcome = improveBySearch(alt, tokens, values, budget, nodeLimit, stopAt);
      if (outcome.improved) {
        refill(alt, tokens, budget, selectedTokens(alt, tokens));
        consider(alt, 'search');
      }
      if (outcome.complete) return finish('dp', null, source);
    }
    alt.fill(0);
    improve(alt, tokens, values, budget, refill(alt, tokens, budget, 0), stopAt);
    consider(alt, 'refill');

    const refineCeiling = Math.min(
      input.refineCellCeiling ?? DEFAULT_REFINE_CELL_CEILING,
      input.dpCellCeiling,
    );
    const unit = refineUnit(n, budget, refineCeiling);
    if (unit > 0 && monotonicNow() < stopAt) {
      const capacity = Math.floor(budget / unit);
      for (let k = 0; k < n; k++) weights[k] = Math.ceil(tokens[k]! / unit);
      try {
        knapsack(weights, values, capacity, alt, stopAt);
        improve(
          alt,
          tokens,
          values,
          budget,
          refill(alt, tokens, budget, selectedTokens(alt, tokens)),
          stopAt,
        );
        consider(alt, 'refined');
      } catch (err) {
        if (!(err instanceof DeadlineReached)) throw err;
      }
    }
    return finish('dp', null, source);
  } catch (err) {
    if (err instanceof DeadlineReached) return greedyPath('deadline');
    throw err;
  }
}

/**
 * Finest bucket size (tokens) whose table n × (floor(budget/unit) + 1) fits `ceiling`, if finer than
 * 16-token buckets; 0 when no finer table fits.
 */
export function refineUnit(n: number, budget: number, ceiling: number): number {
  if (ceiling <= 0 || n === 0) return 0;
  const maxCapacity = Math.floor(ceiling / n) - 1;
  if (maxCapacity < 1) return 0;
  const unit = Math.max(1, Math.ceil(budget / maxCapacity));
  // floor(budget/unit) ≤ maxCapacity holds for unit = ceil(budget/maxCapacity).
  return unit < BUCKET_TOKENS ? unit : 0;
}

function buildResult(
  sel: Uint8Array,
  order: Int32Array,
  tokens: Int32Array,
  values: Float64Array,
  budget: number,
  path: 'dp' | 'greedy',
  reason: GreedyReason | null,
  source: PackResult['source'],
  cells: number,
  buckets: number,
): PackResult {
  const n = sel.length;
  let count = 0;
  for (let k = 0; k < n; k++) count += sel[k]!;
  const selected = new Int32Array(count);
  const excluded = new Int32Array(n - count);
  let totalTokens = 0;
  let totalScore = 0;
  let a = 0;
  let b = 0;
  for (let k = 0; k < n; k++) {
    if (sel[k] === 1) {
      selected[a++] = order[k]!;
      totalTokens += tokens[k]!;
      totalScore += values[k]!;
    } else {
      excluded[b++] = order[k]!;
    }
  }
  if (totalTokens > budget && count > 0) {
    throw Errors.budgetExceeded(totalTokens, budget);
  }
  return {
    selected,
    excluded,
    total_tokens: totalTokens,
    total_score: totalScore,
    skipped_count: n - count,
    was_budget_reached: n - count > 0,
    path,
    greedy_reason: reason,
    candidates_evaluated: n,
    cells,
    buckets,
    source,
  };
}
