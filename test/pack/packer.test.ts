/**
 * Packer (contract.md §8): fixed cases and properties — never over budget, independent of input order, never
 * below the greedy fallback, equal to brute force on small exact instances, deadline fallback.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalOrder, pack, refineUnit } from '../../src/pack/packer.js';
import { assertPacks, bruteForce, type Item, idsOf, itemsOf, toInput } from './pack-helpers.js';

/** Greedy fallback of contract.md §8 step 4, written out independently. */
function greedyScore(items: readonly Item[], budget: number, maxSkips: number): number {
  // contract.md §8: a budget ≤ 0 gives an empty result, zero-token candidates included (as the packer does).
  if (budget <= 0) return 0;
  const sorted = [...items].sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  let left = budget;
  let skips = 0;
  let score = 0;
  for (const it of sorted) {
    if (it.tokens <= left) {
      left -= it.tokens;
      score += it.score;
      skips = 0;
    } else if (++skips > maxSkips) break;
  }
  return score;
}

const itemArb = (tokens: fc.Arbitrary<number>) =>
  fc.record({ score: fc.double({ min: 0, max: 1, noNaN: true }), tokens });
const itemsArb = (tokens: fc.Arbitrary<number>, maxLength: number) =>
  fc
    .array(itemArb(tokens), { maxLength })
    .map((xs) => xs.map((x, i) => ({ ...x, id: `m-${String(i).padStart(3, '0')}` })));

describe('pack: fixed cases', () => {
  it('returns an empty dp result for no candidates, not a truncation', () => {
    const r = pack(toInput([], 100));
    expect(r).toMatchObject({
      path: 'dp',
      skipped_count: 0,
      was_budget_reached: false,
      total_tokens: 0,
      total_score: 0,
    });
  });

  it('returns nothing, all skipped and budget reached, for a budget ≤ 0', () => {
    const items = [{ id: 'a', score: 0.9, tokens: 0 }];
    expect(pack(toInput(items, 0))).toMatchObject({ path: 'dp', skipped_count: 1, was_budget_reached: true });
  });

  it('takes the optimum where floor-rounded 16-token buckets strand the budget', () => {
    // Budget 32 = 2 buckets and every item weighs 1 bucket, so ADR-0069's table takes d + a (34 tokens),
    // repair drops a and nothing else fits: 0.8. The exact refinement table (search off) and the
    // branch-and-bound both find a + b = 32 tokens: 1.1.
    const items = itemsOf(['a', 0.6, 9], ['b', 0.5, 23], ['c', 0.4, 12], ['d', 0.8, 25]);
    const adr = pack(toInput(items, 32, { adr0069Only: true }));
    expect(idsOf(items, adr.selected)).toEqual(['d']);
    expect(adr.total_score).toBe(0.8);
    const table = pack(toInput(items, 32, { searchNodeLimit: 0 }));
    expect(idsOf(items, table.selected)).toEqual(['a', 'b']);
    expect(table).toMatchObject({ total_tokens: 32, total_score: 1.1, source: 'refined' });
    const r = pack(toInput(items, 32));
    expect(idsOf(items, r.selected)).toEqual(['a', 'b']);
    expect(r).toMatchObject({
      total_tokens: 32,
      total_score: 1.1,
      path: 'dp',
      source: 'search',
      skipped_count: 2,
    });
  });

  it('falls back to greedy above the cell ceiling and stops after the skip limit', () => {
    const items = itemsOf(['a', 0.9, 60], ['b', 0.8, 50], ['c', 0.7, 50], ['d', 0.6, 30]);
    const r = pack(toInput(items, 100, { dpCellCeiling: 4, maxConsecutiveSkips: 1 }));
    expect(r.path).toBe('greedy');
    expect(r.greedy_reason).toBe('cell_ceiling');
    expect(idsOf(items, r.selected)).toEqual(['a']); // b and c skipped: 2 > 1, stop before d
    const r2 = pack(toInput(items, 100, { dpCellCeiling: 4, maxConsecutiveSkips: 2 }));
    expect(idsOf(items, r2.selected)).toEqual(['a', 'd']);
  });

  it('finishes on the greedy path when the deadline is spent', () => {
    const items = Array.from({ length: 200 }, (_, i) => ({
      id: `m${i}`,
      score: (i % 97) / 97,
      tokens: 100 + (i % 700),
    }));
    const r = pack(
      toInput(items, 20_000, {
        dpCellCeiling: 10_000_000,
        deadline: performance.timeOrigin + performance.now(),
      }),
    );
    expect(r.path).toBe('greedy');
    expect(r.greedy_reason).toBe('deadline');
    expect(r.total_tokens).toBeLessThanOrEqual(20_000);
  });

  it('orders by score descending, then memory_id in code-point order', () => {
    const ids = ['b', '😀', '\uffff', 'a'];
    const order = canonicalOrder(ids, Float64Array.from([0.5, 0.5, 0.5, 0.9]));
    expect(Array.from(order, (k) => ids[k])).toEqual(['a', 'b', '\uffff', '😀']);
  });

  it('refines only when a finer table fits under the ceiling', () => {
    expect(refineUnit(10, 1000, 32_768)).toBe(1);
    expect(refineUnit(70, 8000, 437_570)).toBe(2);
    expect(refineUnit(70, 100_000, 32_768)).toBe(0);
    expect(refineUnit(0, 100, 100)).toBe(0);
  });
});

describe('pack: properties', () => {
  const tokens = fc.integer({ min: 0, max: 3000 });
  const budget = fc.integer({ min: -10, max: 20_000 });

  it('never exceeds the budget; skipped + selected = n', () => {
    assertPacks(itemsArb(tokens, 80), budget, fc.integer({ min: 1, max: 200_000 }), (items, b, ceiling) => {
      const r = pack(toInput(items, b, { dpCellCeiling: ceiling }));
      expect(r.total_tokens).toBeLessThanOrEqual(Math.max(0, b));
      expect(r.skipped_count + r.selected.length).toBe(items.length);
      expect(r.candidates_evaluated).toBe(items.length);
    });
  });

  it('does not depend on input order', () => {
    fc.assert(
      fc.property(
        itemsArb(tokens, 40).chain((items) =>
          fc.tuple(fc.constant(items), fc.shuffledSubarray(items, { minLength: items.length })),
        ),
        budget,
        ([items, shuffled], b) => {
          const a = pack(toInput(items, b));
          const c = pack(toInput(shuffled, b));
          expect(idsOf(shuffled, c.selected)).toEqual(idsOf(items, a.selected));
          expect(c.total_score).toBe(a.total_score);
          expect(c.path).toBe(a.path);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('scores at least the greedy fallback on the same input', () => {
    assertPacks(itemsArb(tokens, 60), budget, fc.integer({ min: 0, max: 6 }), (items, b, skips) => {
      const r = pack(toInput(items, b, { maxConsecutiveSkips: skips }));
      if (r.path === 'dp') expect(r.total_score).toBeGreaterThanOrEqual(greedyScore(items, b, skips) - 1e-9);
    });
  });

  it('equals brute force for n ≤ 12 with token counts that are multiples of 16', () => {
    const multiples = fc.integer({ min: 0, max: 40 }).map((k) => k * 16);
    assertPacks(
      itemsArb(multiples, 12),
      fc.integer({ min: 0, max: 400 }).map((k) => k * 16),
      (items, b) => {
        const r = pack(toInput(items, b));
        expect(r.path).toBe('dp');
        expect(r.total_score).toBeCloseTo(bruteForce(items, b), 9);
      },
    );
  });

  it('reaches the brute-force optimum on small instances with arbitrary token counts', () => {
    fc.assert(
      fc.property(
        itemsArb(fc.integer({ min: 1, max: 700 }), 12),
        fc.integer({ min: 1, max: 3000 }),
        (items, b) => {
          expect(pack(toInput(items, b)).total_score).toBeCloseTo(bruteForce(items, b), 9);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('keeps ADR-0069 answers when refinement is disabled or cannot help (never below them)', () => {
    fc.assert(
      fc.property(itemsArb(tokens, 50), budget, (items, b) => {
        const adr = pack(toInput(items, b, { adr0069Only: true }));
        const refined = pack(toInput(items, b));
        expect(refined.path).toBe(adr.path);
        expect(refined.total_score).toBeGreaterThanOrEqual(adr.total_score - 1e-9);
        if (refined.source === 'adr0069')
          expect(Array.from(refined.selected)).toEqual(Array.from(adr.selected));
      }),
      { numRuns: 200 },
    );
  });
});
