/**
 * Shared by the packer tests: items as `{id, score, tokens}`, their packer input, the ids of a selection,
 * and the brute-force optimum (contract.md §8) the properties compare with.
 */
import fc from 'fast-check';
import type { pack } from '../../src/pack/packer.js';

export interface Item {
  id: string;
  score: number;
  tokens: number;
}

/** Items from `[id, score, tokens]` triples, in order. */
export const itemsOf = (...triples: [id: string, score: number, tokens: number][]): Item[] =>
  triples.map(([id, score, tokens]) => ({ id, score, tokens }));

export const toInput = (
  items: readonly Item[],
  budget: number,
  extra: Partial<Parameters<typeof pack>[0]> = {},
) => ({
  ids: items.map((i) => i.id),
  scores: Float64Array.from(items, (i) => i.score),
  tokens: Int32Array.from(items, (i) => i.tokens),
  budget,
  dpCellCeiling: 437_570,
  maxConsecutiveSkips: 5,
  ...extra,
});

export const idsOf = (items: readonly Item[], selected: Int32Array) =>
  Array.from(selected, (k) => items[k]!.id);

/** Best total score of any subset within `budget` (contract.md §8 step 2: a budget ≤ 0 packs nothing). */
export function bruteForce(items: readonly Item[], budget: number): number {
  if (budget <= 0) return 0;
  let best = 0;
  for (let mask = 0; mask < 1 << items.length; mask++) {
    let t = 0;
    let s = 0;
    for (let i = 0; i < items.length; i++) {
      if (mask & (1 << i)) {
        t += items[i]!.tokens;
        s += items[i]!.score;
      }
    }
    if (t <= budget && s > best) best = s;
  }
  return best;
}

/**
 * Asserts a packer property over 300 generated cases (fast-check's `fc.property` arguments: arbitraries,
 * then the predicate); throws with the shrunk counterexample when it fails.
 */
export function assertPacks<Ts extends [unknown, ...unknown[]]>(
  ...args: [
    ...arbitraries: { [K in keyof Ts]: fc.Arbitrary<Ts[K]> },
    // biome-ignore lint/suspicious/noConfusingVoidType: fast-check's own predicate type (`fc.property`)
    predicate: (...args: Ts) => boolean | void,
  ]
): void {
  fc.assert(fc.property(...args), { numRuns: 300 });
}
