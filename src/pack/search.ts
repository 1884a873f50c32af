/**
 * Bounded branch-and-bound on exact token weights: the packer's last refinement (contract.md §8 "Beyond
 * ADR-0069").
 *
 * Why: the bucketed tables round weights, so on large n × budget (where the finer table no longer fits)
 * or a small `dp_cell_ceiling` their answer strands budget. A depth-first search over items in efficiency
 * order (score per token), pruned by the Dantzig (fractional) bound and seeded with the DP answer as the
 * incumbent, closes that gap: on uncorrelated score/size instances it proves the optimum in a few hundred
 * nodes. It is bounded by a node limit and the deadline, and only ever returns a strictly better selection,
 * so the never-below-ADR-0069 rule holds by construction.
 */
import { monotonicNow } from '../util/clock.js';
import { sortIndices } from './index-sort.js';

/**
 * Default node limit of {@link improveBySearch}. A node costs ~80 ns (n = 120), so the worst case adds
 * ~0.4 ms; the generated instances of bench:pack need at most ~2,300 nodes to prove the optimum.
 */
export const DEFAULT_SEARCH_NODE_LIMIT = 5000;

/** What {@link improveBySearch} did. */
export interface SearchOutcome {
  /** True when `sel` was replaced by a strictly better selection. */
  improved: boolean;
  /** True when the whole tree was explored (the result is then optimal). */
  complete: boolean;
  /** Nodes visited. */
  nodes: number;
}

// Scratch reused across calls (one packer per thread, calls never interleave): no allocation per call.
let scratchIdx = new Int32Array(0);
let scratchW = new Float64Array(0);
let scratchV = new Float64Array(0);
let scratchPrefW = new Float64Array(0);
let scratchPrefV = new Float64Array(0);
let scratchTake = new Uint8Array(0);
let scratchBestTake = new Uint8Array(0);
let scratchState = new Uint8Array(0);

function ensureScratch(n: number): void {
  if (scratchIdx.length >= n + 1) return;
  const size = Math.max(n + 1, 2 * scratchIdx.length);
  scratchIdx = new Int32Array(size);
  scratchW = new Float64Array(size);
  scratchV = new Float64Array(size);
  scratchPrefW = new Float64Array(size + 1);
  scratchPrefV = new Float64Array(size + 1);
  scratchTake = new Uint8Array(size);
  scratchBestTake = new Uint8Array(size);
  scratchState = new Uint8Array(size + 1);
}

/**
 * Searches for a selection better than `sel` under `budget` with exact token weights.
 *
 * @param sel 1 at selected positions; overwritten only when a strictly better (by > `epsilon`) selection
 *   is found
 * @param tokens exact token cost per position (≥ 0)
 * @param values score per position (≥ 0, float64)
 * @param budget capacity in tokens
 * @param nodeLimit most nodes to visit (each costs O(log n))
 * @param deadline epoch ms after which the search stops with what it has
 * @param epsilon least gain that counts as an improvement (float noise on equal answers)
 */
export function improveBySearch(
  sel: Uint8Array,
  tokens: Int32Array,
  values: Float64Array,
  budget: number,
  nodeLimit: number,
  deadline: number,
  epsilon = 1e-9,
): SearchOutcome {
  const n = sel.length;
  // Free items (0 tokens, positive score) are always in; items heavier than the budget never.
  let freeValue = 0;
  let m = 0;
  ensureScratch(n);
  const idx = scratchIdx;
  for (let i = 0; i < n; i++) {
    const t = tokens[i]!;
    const v = values[i]!;
    if (!(v > 0)) continue;
    if (t === 0) freeValue += v;
    else if (t <= budget) idx[m++] = i;
  }
  let incumbent = -freeValue;
  for (let i = 0; i < n; i++) if (sel[i] === 1) incumbent += values[i]!;
  if (m === 0 || nodeLimit <= 0) return { improved: false, complete: m === 0, nodes: 0 };

  // Efficiency order; ties by lighter first so the bound's critical item is as tight as possible.
  const items = efficiencyOrder(idx.subarray(0, m), tokens, values);
  const w = scratchW;
  const v = scratchV;
  const prefW = scratchPrefW;
  const prefV = scratchPrefV;
  prefW[0] = 0;
  prefV[0] = 0;
  for (let k = 0; k < m; k++) {
    w[k] = tokens[items[k]!]!;
    v[k] = values[items[k]!]!;
    prefW[k + 1] = prefW[k]! + w[k]!;
    prefV[k + 1] = prefV[k]! + v[k]!;
  }
  // Fractional bound of items k.. under `cap`: whole items up to the critical one, then its fraction.
  const bound = (k: number, cap: number): number => {
    const limit = prefW[k]! + cap;
    let lo = k;
    let hi = m;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (prefW[mid]! <= limit) lo = mid;
      else hi = mid - 1;
    }
    const whole = prefV[lo]! - prefV[k]!;
    if (lo >= m) return whole;
    return whole + ((limit - prefW[lo]!) * v[lo]!) / w[lo]!;
  };

  const take = scratchTake;
  const bestTake = scratchBestTake;
  take.fill(0, 0, m);
  let best = incumbent;
  let found = false;
  let nodes = 0;
  let stopped = false;
  const checkClock = Number.isFinite(deadline);

  // Iterative DFS, include-branch first. `k` is the depth; `state[k]`: 0 = try include, 1 = try exclude,
  // 2 = done. Values and capacity are kept incrementally.
  const state = scratchState;
  let k = 0;
  let cap = budget;
  let val = 0;
  state[0] = 0;
  while (k >= 0) {
    if (k === m) {
      if (val > best + epsilon) {
        best = val;
        bestTake.set(take.subarray(0, m));
        found = true;
      }
      k--;
      continue;
    }
    const s = state[k]!;
    if (s === 0) {
      nodes++;
      if (nodes > nodeLimit || (checkClock && (nodes & 1023) === 0 && monotonicNow() > deadline)) {
        stopped = true;
        break;
      }
      if (val + bound(k, cap) <= best + epsilon) {
        // Nothing below this node can beat the incumbent.
        state[k] = 2;
        k--;
        continue;
      }
      state[k] = 1;
      if (w[k]! <= cap) {
        take[k] = 1;
        cap -= w[k]!;
        val += v[k]!;
        k++;
        state[k] = 0;
      }
      continue;
    }
    if (s === 1) {
      if (take[k] === 1) {
        take[k] = 0;
        cap += w[k]!;
        val -= v[k]!;
      }
      state[k] = 2;
      if (val + bound(k + 1, cap) > best + epsilon) {
        k++;
        state[k] = 0;
      } else {
        k--;
      }
      continue;
    }
    // s === 2: both branches done; back up, undoing this level's take in the parent's bookkeeping.
    k--;
  }

  if (!found) return { improved: false, complete: !stopped, nodes };
  sel.fill(0);
  for (let i = 0; i < n; i++) if (tokens[i] === 0 && values[i]! > 0) sel[i] = 1;
  for (let q = 0; q < m; q++) if (bestTake[q] === 1) sel[items[q]!] = 1;
  return { improved: true, complete: !stopped, nodes };
}

/** Sorts `idx` in place by score per token descending, then tokens ascending. */
function efficiencyOrder(idx: Int32Array, tokens: Int32Array, values: Float64Array): Int32Array {
  // a before b iff v_a/t_a > v_b/t_b (cross-multiplied: no division), or equal and t_a < t_b.
  const before = (a: number, b: number): boolean => {
    const d = values[a]! * tokens[b]! - values[b]! * tokens[a]!;
    return d !== 0 ? d > 0 : tokens[a]! < tokens[b]!;
  };
  return sortIndices(idx, before, 128);
}
