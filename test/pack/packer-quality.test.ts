/**
 * Packer quality beyond ADR-0069 (contract.md §8): the branch-and-bound refinement reaches the optimum
 * where the bucketed tables strand budget, never goes below ADR-0069's answer, keeps the path decision,
 * and stays within the budget when its node limit or deadline cuts it short.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { pack } from '../../src/pack/packer.js';
import { improveBySearch } from '../../src/pack/search.js';
import { assertPacks, bruteForce, idsOf, itemsOf, toInput } from './pack-helpers.js';

// One-decimal scores half the time: many ties, the case where ordering subtleties show.
const scoreArb = fc.oneof(
  fc.double({ min: 0, max: 1, noNaN: true }),
  fc.integer({ min: 0, max: 10 }).map((k) => k / 10),
);
const itemsArb = (tokens: fc.Arbitrary<number>, maxLength: number) =>
  fc
    .array(fc.record({ score: scoreArb, tokens }), { maxLength })
    .map((xs) => xs.map((x, i) => ({ ...x, id: `m-${String(i).padStart(3, '0')}` })));

describe('pack beyond ADR-0069: fixed cases', () => {
  it('reaches the optimum with dp_cell_ceiling 50 where 16-token weights fit two of three items', () => {
    // Budget 100 = 6 buckets, each item weighs 3: the table takes x + y (110 tokens), repair drops y and
    // nothing else fits, so ADR-0069 keeps 0.8; y + z = 100 tokens scores 1.0.
    const items = itemsOf(['x', 0.8, 60], ['y', 0.5, 50], ['z', 0.5, 50]);
    const adr = pack(toInput(items, 100, { dpCellCeiling: 50, adr0069Only: true }));
    expect(idsOf(items, adr.selected)).toEqual(['x']);
    expect(adr.total_score).toBe(0.8);
    const r = pack(toInput(items, 100, { dpCellCeiling: 50 }));
    expect(idsOf(items, r.selected)).toEqual(['y', 'z']);
    expect(r).toMatchObject({ path: 'dp', total_tokens: 100, total_score: 1, source: 'search' });
  });

  it('search with a node limit of 1 keeps the incumbent and reports an incomplete search', () => {
    const sel = Uint8Array.from([1, 0, 0]);
    const tokens = Int32Array.from([60, 50, 50]);
    const values = Float64Array.from([0.8, 0.5, 0.5]);
    const out = improveBySearch(sel, tokens, values, 100, 1, Number.POSITIVE_INFINITY);
    expect(out).toEqual({ improved: false, complete: false, nodes: 2 });
    expect(Array.from(sel)).toEqual([1, 0, 0]);
  });

  it('search reads the clock every 1024 nodes, so a tree smaller than that completes even past its deadline', () => {
    const sel = Uint8Array.from([1, 0, 0]);
    const out = improveBySearch(
      sel,
      Int32Array.from([60, 50, 50]),
      Float64Array.from([0.8, 0.5, 0.5]),
      100,
      20_000,
      0,
    );
    // The clock is read every 1024 nodes; this tree is smaller, so it completes: the answer is still right.
    expect(out.complete).toBe(true);
    expect(Array.from(sel)).toEqual([0, 1, 1]);
  });
});

describe('search deadline (injected clock)', () => {
  afterEach(() => vi.restoreAllMocks());

  it('stops at its first clock check once the deadline has passed, keeping a valid selection', () => {
    // Scores proportional to size: the fractional bound prunes little, so the tree has far more than 1024
    // nodes and the search must read the clock.
    const n = 60;
    const tokens = Int32Array.from({ length: n }, (_, i) => 100 + ((i * 37) % 900));
    const values = Float64Array.from(tokens, (t) => (t + 100) / 1100);
    const sel = new Uint8Array(n);
    const start = performance.now();
    // Every reading inside the search is a minute later than the deadline's base.
    vi.spyOn(performance, 'now').mockReturnValue(start + 60_000);
    const deadline = performance.timeOrigin + start + 1000;
    const out = improveBySearch(sel, tokens, values, 5000, 1_000_000, deadline);
    expect(out).toMatchObject({ complete: false, nodes: 1024 });
    expect(
      improveBySearch(new Uint8Array(n), tokens, values, 5000, 1_000_000, Number.POSITIVE_INFINITY).nodes,
    ).toBeGreaterThan(1024);
    let used = 0;
    for (let i = 0; i < n; i++) if (sel[i] === 1) used += tokens[i]!;
    expect(used).toBeLessThanOrEqual(5000);
  });
});

describe('pack beyond ADR-0069: properties', () => {
  const ceiling = fc.oneof(fc.constant(437_570), fc.integer({ min: 1, max: 400 }));

  it('never exceeds the budget, whatever the node limit', () => {
    assertPacks(
      itemsArb(fc.integer({ min: 0, max: 3000 }), 80),
      fc.integer({ min: -5, max: 20_000 }),
      ceiling,
      fc.integer({ min: 0, max: 300 }),
      (items, b, c, nodes) => {
        const r = pack(toInput(items, b, { dpCellCeiling: c, searchNodeLimit: nodes }));
        expect(r.total_tokens).toBeLessThanOrEqual(Math.max(0, b));
        expect(r.total_tokens).toBe(
          Array.from(r.selected, (k) => items[k]!.tokens).reduce((x, y) => x + y, 0),
        );
        expect(r.skipped_count + r.selected.length).toBe(items.length);
      },
    );
  });

  it('is never below the ADR-0069 answer and keeps its path', () => {
    assertPacks(
      itemsArb(fc.integer({ min: 0, max: 3000 }), 80),
      fc.integer({ min: 0, max: 20_000 }),
      ceiling,
      (items, b, c) => {
        const adr = pack(toInput(items, b, { dpCellCeiling: c, adr0069Only: true }));
        const ours = pack(toInput(items, b, { dpCellCeiling: c }));
        expect(ours.path).toBe(adr.path);
        expect(ours.total_score).toBeGreaterThanOrEqual(adr.total_score - 1e-9);
      },
    );
  });

  it('equals brute force for n ≤ 12 on the DP path, also with a small dp_cell_ceiling', () => {
    fc.assert(
      fc.property(
        itemsArb(fc.integer({ min: 0, max: 900 }), 12),
        fc.integer({ min: 1, max: 4000 }),
        ceiling,
        (items, b, c) => {
          const r = pack(toInput(items, b, { dpCellCeiling: c }));
          if (r.path === 'dp') expect(r.total_score).toBeCloseTo(bruteForce(items, b), 9);
        },
      ),
      { numRuns: 400 },
    );
  });
});
