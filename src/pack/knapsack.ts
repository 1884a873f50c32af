/** Band-limited bucketed 0/1 knapsack on typed arrays (contract.md §8 step 5, ADR-0069). */
import { monotonicNow } from '../util/clock.js';

/** Thrown inside the DP when the deadline is nearly spent; never escapes `pack`. */
export class DeadlineReached extends Error {}

// Scratch reused across calls: one packer per thread and calls never interleave.
let bestRow = new Float64Array(0);
let keepTable = new Uint8Array(0);
let rowMeta = new Int32Array(0);

function ensureScratch(capacity: number, cells: number, rows: number): void {
  if (bestRow.length < capacity + 1) bestRow = new Float64Array(Math.max(capacity + 1, bestRow.length * 2));
  if (keepTable.length < cells) keepTable = new Uint8Array(Math.max(cells, keepTable.length * 2));
  if (rowMeta.length < rows * 3) rowMeta = new Int32Array(Math.max(rows * 3, rowMeta.length * 2));
}

/**
 * ADR-0069's recurrence (take iff best[c − w] + v > best[c], strict) over items in canonical order,
 * computed only on cells the backtrack can reach; each holds the value the full table would.
 * @param out 1 at selected canonical positions (overwritten).
 * @returns cells computed. @throws DeadlineReached when `deadline` passes between rows.
 */
export function knapsack(
  weights: Int32Array,
  values: Float64Array,
  capacity: number,
  out: Uint8Array,
  deadline: number,
): number {
  const n = weights.length;
  const suffix = new Float64Array(n + 1);
  for (let i = n - 1; i >= 0; i--) {
    const w = weights[i]!;
    suffix[i] = suffix[i + 1]! + (w <= capacity ? w : 0);
  }
  ensureScratch(capacity, n * (capacity + 1), n);
  const best = bestRow;
  const keep = keepTable;
  const meta = rowMeta;
  best[0] = 0;
  let prefix = 0;
  let cursor = 0;
  let computed = 0;
  const checkClock = Number.isFinite(deadline);
  for (let i = 0; i < n; i++) {
    if (checkClock && (i & 3) === 0 && monotonicNow() > deadline) throw new DeadlineReached();
    const w = weights[i]!;
    const v = values[i]!;
    const takeable = w <= capacity;
    const hi = takeable ? Math.min(capacity, prefix + w) : prefix;
    if (hi > prefix) best.fill(best[prefix]!, prefix + 1, hi + 1);
    const lo = Math.max(0, Math.min(capacity - suffix[i + 1]!, hi));
    meta[3 * i] = lo;
    meta[3 * i + 1] = hi;
    meta[3 * i + 2] = cursor;
    const base = cursor - lo;
    if (!takeable || w > hi) {
      keep.fill(0, cursor, cursor + hi - lo + 1);
    } else {
      // High to low, so best[c − w] still holds the previous row's value.
      const mid = Math.max(lo, w);
      for (let c = hi; c >= mid; c--) {
        const candidate = best[c - w]! + v;
        if (candidate > best[c]!) {
          best[c] = candidate;
          keep[base + c] = 1;
        } else {
          keep[base + c] = 0;
        }
      }
      if (mid > lo) keep.fill(0, cursor, cursor + mid - lo);
    }
    cursor += hi - lo + 1;
    computed += hi - lo + 1;
    prefix = hi;
  }
  out.fill(0);
  let c = capacity;
  for (let i = n - 1; i >= 0; i--) {
    const lo = meta[3 * i]!;
    const hi = meta[3 * i + 1]!;
    if (c > hi) c = hi;
    if (c < lo) throw new Error(`knapsack backtrack left the computed band at row ${i}`);
    if (keep[meta[3 * i + 2]! - lo + c] === 1) {
      out[i] = 1;
      c -= weights[i]!;
    }
  }
  return computed;
}
