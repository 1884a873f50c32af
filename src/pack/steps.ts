/** The packer's selection steps on canonical positions (contract.md §8 steps 4, 6–8); `sel[i]` = 1 when selected. */
import { compareCodePoints } from '../text/code-point-order.js';
import { monotonicNow } from '../util/clock.js';

export function selectedTokens(sel: Uint8Array, tokens: Int32Array): number {
  let t = 0;
  for (let i = 0; i < sel.length; i++) if (sel[i] === 1) t += tokens[i]!;
  return t;
}

export function selectedScore(sel: Uint8Array, values: Float64Array): number {
  let s = 0;
  for (let i = 0; i < sel.length; i++) if (sel[i] === 1) s += values[i]!;
  return s;
}

/** Step 6: while over budget, drop the selected item with the lowest (score, memory_id). */
export function repair(
  sel: Uint8Array,
  tokens: Int32Array,
  values: Float64Array,
  ids: readonly string[],
  budget: number,
) {
  let total = selectedTokens(sel, tokens);
  while (total > budget) {
    let worst = -1;
    for (let i = 0; i < sel.length; i++) {
      if (sel[i] !== 1) continue;
      if (
        worst < 0 ||
        values[i]! < values[worst]! ||
        (values[i] === values[worst] && compareCodePoints(ids[i]!, ids[worst]!) < 0)
      ) {
        worst = i;
      }
    }
    sel[worst] = 0;
    total -= tokens[worst]!;
  }
  return total;
}

/** Step 7: add every unselected item, in canonical order, whose tokens fit what is left. */
export function refill(sel: Uint8Array, tokens: Int32Array, budget: number, total: number): number {
  for (let i = 0; i < sel.length; i++) {
    if (sel[i] === 0 && total + tokens[i]! <= budget) {
      sel[i] = 1;
      total += tokens[i]!;
    }
  }
  return total;
}

/** Step 8: best single swap, then refill, until nothing changes; O(n²) a round, so it stops at `deadline`. */
export function improve(
  sel: Uint8Array,
  tokens: Int32Array,
  values: Float64Array,
  budget: number,
  total: number,
  deadline: number,
): number {
  const n = sel.length;
  // Each swap strictly raises the score; the cap guards against pathological float ties.
  for (let round = 0; round < 4 * n + 16; round++) {
    if (round > 0 && monotonicNow() > deadline) break;
    let bestGain = 0;
    let bs = -1;
    let bu = -1;
    for (let s = 0; s < n; s++) {
      if (sel[s] !== 1) continue;
      const room = budget - total + tokens[s]!;
      const vs = values[s]!;
      for (let u = 0; u < n; u++) {
        if (sel[u] !== 0 || tokens[u]! > room) continue;
        const gain = values[u]! - vs;
        if (gain > bestGain) {
          bestGain = gain;
          bs = s;
          bu = u;
        }
      }
    }
    if (bs < 0) break;
    sel[bs] = 0;
    sel[bu] = 1;
    total = refill(sel, tokens, budget, total - tokens[bs]! + tokens[bu]!);
  }
  return total;
}

/** Greedy fallback (step 4): canonical walk, stop once consecutive skips exceed the limit. */
export function greedy(sel: Uint8Array, tokens: Int32Array, budget: number, maxSkips: number): number {
  sel.fill(0);
  let total = 0;
  let skips = 0;
  for (let i = 0; i < sel.length; i++) {
    if (total + tokens[i]! <= budget) {
      sel[i] = 1;
      total += tokens[i]!;
      skips = 0;
    } else if (++skips > maxSkips) {
      break;
    }
  }
  return total;
}
