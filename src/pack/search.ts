/**
 * Bounded branch-and-bound on exact token weights, the packer's last refinement (contract.md §8): it
 * recovers budget the bucketed tables strand, and returns only strictly better selections.
 */
import { monotonicNow } from '../util/clock.js';
import { sortIndices } from './index-sort.js';

/** Figures: docs/design/packing.md. */
export const DEFAULT_SEARCH_NODE_LIMIT = 5000;

export interface SearchOutcome {
  improved: boolean;
  /** The whole tree was explored: the result is optimal. */
  complete: boolean;
  nodes: number;
}

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
 * @param sel 1 at selected positions; overwritten only by a selection better by > `epsilon`.
 * @param deadline epoch ms after which the search stops with what it has.
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

  // Ties lighter first, so the bound's critical item is as tight as possible.
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

  // Iterative DFS, include first; `state[k]`: 0 = try include, 1 = try exclude, 2 = done.
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
    k--;
  }

  if (!found) return { improved: false, complete: !stopped, nodes };
  sel.fill(0);
  for (let i = 0; i < n; i++) if (tokens[i] === 0 && values[i]! > 0) sel[i] = 1;
  for (let q = 0; q < m; q++) if (bestTake[q] === 1) sel[items[q]!] = 1;
  return { improved: true, complete: !stopped, nodes };
}

function efficiencyOrder(idx: Int32Array, tokens: Int32Array, values: Float64Array): Int32Array {
  // Cross-multiplied: no division.
  const before = (a: number, b: number): boolean => {
    const d = values[a]! * tokens[b]! - values[b]! * tokens[a]!;
    return d !== 0 ? d > 0 : tokens[a]! < tokens[b]!;
  };
  return sortIndices(idx, before, 128);
}
