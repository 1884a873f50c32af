/**
 * The packer (contract.md §8, ADR-0069): ADR-0069 always runs and decides the path; on the DP path a
 * refinement replaces its answer only when strictly better (docs/design/packing.md).
 */

import { compareCodePoints } from '../text/code-point-order.js';
import { monotonicNow } from '../util/clock.js';
import { Errors } from '../wire/errors.js';
import { sortIndices } from './index-sort.js';
import { DeadlineReached, knapsack } from './knapsack.js';
import { DEFAULT_SEARCH_NODE_LIMIT, improveBySearch } from './search.js';
import { greedy, improve, refill, repair, selectedScore, selectedTokens } from './steps.js';

export const BUCKET_TOKENS = 16;

/** Small budgets, where 16-token floor weights strand most of the budget, get an exact or near-exact table. */
export const DEFAULT_REFINE_CELL_CEILING = 32_768;

export type GreedyReason = 'cell_ceiling' | 'deadline';

/** One entry per candidate, in any order. */
export interface PackInput {
  ids: readonly string[];
  scores: Float64Array;
  /** Raw content estimate (vectors) or wrapped block cost (assembly). */
  tokens: Int32Array;
  budget: number;
  /** n × (buckets + 1) (contract.md §3). */
  dpCellCeiling: number;
  maxConsecutiveSkips: number;
  /** Epoch ms on the `monotonicNow()` clock; the DP finishes greedy when it is nearly spent. */
  deadline?: number;
  /** Default 0.25 ms. */
  deadlineMarginMs?: number;
  /** Default min(dpCellCeiling, {@link DEFAULT_REFINE_CELL_CEILING}); 0 disables refinement. */
  refineCellCeiling?: number;
  /** Default {@link DEFAULT_SEARCH_NODE_LIMIT}; 0 disables the search. */
  searchNodeLimit?: number;
  /** ADR-0069's answer alone: the reference for benches and tests. */
  adr0069Only?: boolean;
}

export interface PackResult {
  /** Canonical order. */
  selected: Int32Array;
  excluded: Int32Array;
  total_tokens: number;
  total_score: number;
  skipped_count: number;
  was_budget_reached: boolean;
  path: 'dp' | 'greedy';
  greedy_reason: GreedyReason | null;
  candidates_evaluated: number;
  cells: number;
  buckets: number;
  source: 'adr0069' | 'refined' | 'refill' | 'search' | 'greedy' | 'trivial';
}

/** Score descending, memory_id ascending (code points), then input index. */
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
 * @returns the selection in canonical order; `total_tokens ≤ budget` always.
 * @throws IbexError `IBEX_ERR_BUDGET_EXCEEDED` on an invariant breach (impossible by construction).
 */
export function pack(input: PackInput): PackResult {
  const n = input.ids.length;
  const budget = input.budget;
  const order = canonicalOrder(input.ids, input.scores);
  let sumTokens = 0;
  for (let i = 0; i < n; i++) sumTokens += input.tokens[i]!;
  const buckets = Math.max(1, Math.floor(budget / BUCKET_TOKENS));
  const cells = n * (buckets + 1);
  // All fit: the DP would take every positive item and refill the rest.
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
      // By more than float noise, so equal answers keep ADR-0069's selection.
      if (score > bestScore + 1e-9) {
        sel.set(candidate);
        bestScore = score;
        source = from;
      }
    };

    const alt = new Uint8Array(n);
    // A complete search is optimal, so the table refinements are then skipped.
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

/** Finest bucket size whose table fits `ceiling` if finer than 16 tokens; else 0. */
export function refineUnit(n: number, budget: number, ceiling: number): number {
  if (ceiling <= 0 || n === 0) return 0;
  const maxCapacity = Math.floor(ceiling / n) - 1;
  if (maxCapacity < 1) return 0;
  const unit = Math.max(1, Math.ceil(budget / maxCapacity));
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
