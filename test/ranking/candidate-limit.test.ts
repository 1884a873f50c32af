import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CandidateLimit, ROOMY_FLOOR_SHARE } from '../../src/ranking/candidate-limit.js';
import { SEARCH_LIMIT } from '../../src/retrieval/validate.js';
import type { MemoryHit } from '../../src/wire/types.js';

/** Hits whose content is `chars` characters each (the running mean learns bytes / 4 tokens). */
function hits(count: number, chars: number): MemoryHit[] {
  return Array.from({ length: count }, () => ({ content: 'x'.repeat(chars) }) as MemoryHit);
}

const settingsArb = fc.record({
  max: fc.integer({ min: 10, max: 5000 }),
  floor: fc.double({ min: 0, max: 0.4999, noNaN: true }),
  chars: fc.integer({ min: 0, max: 4000 }),
});
const budgetArb = fc.integer({ min: 0, max: 2_000_000 });

describe('CandidateLimit.planFor', () => {
  it('keeps the limit within [SEARCH_LIMIT, maxCandidates] and the floor within [floor × ROOMY_FLOOR_SHARE, floor]', () => {
    fc.assert(
      fc.property(settingsArb, budgetArb, ({ max, floor, chars }, budget) => {
        const c = new CandidateLimit(max, floor);
        c.observe(hits(5, chars));
        const plan = c.planFor(budget);
        expect(plan.limit).toBeGreaterThanOrEqual(SEARCH_LIMIT);
        expect(plan.limit).toBeLessThanOrEqual(max);
        expect(plan.floor).toBeLessThanOrEqual(floor);
        expect(plan.floor).toBeGreaterThanOrEqual(floor * ROOMY_FLOOR_SHARE - 1e-12);
        expect(plan.limit).toBe(c.limitFor(budget));
      }),
    );
  });

  it('is monotone in the budget: the limit never falls, the floor never rises', () => {
    fc.assert(
      fc.property(settingsArb, budgetArb, budgetArb, ({ max, floor, chars }, a, b) => {
        const c = new CandidateLimit(max, floor);
        c.observe(hits(5, chars));
        const [small, large] = a <= b ? [a, b] : [b, a];
        const p = c.planFor(small);
        const q = c.planFor(large);
        expect(q.limit).toBeGreaterThanOrEqual(p.limit);
        expect(q.floor).toBeLessThanOrEqual(p.floor + 1e-12);
      }),
    );
  });

  it('keeps the configured floor and the budget-sized limit below the bound (chat turns: 4,000 tokens ask for 200)', () => {
    const c = new CandidateLimit(600, 0.15);
    expect(c.planFor(500)).toEqual({ limit: 25, floor: 0.15 });
    expect(c.planFor(2000)).toEqual({ limit: 100, floor: 0.15 });
    expect(c.planFor(4000)).toEqual({ limit: 200, floor: 0.15 });
    expect(c.planFor(12_000)).toEqual({ limit: 600, floor: 0.15 });
  });

  it('lowers the floor to 1 % once the budget holds every candidate (an unlimited call: the window)', () => {
    const c = new CandidateLimit(600, 0.15);
    // 36,000 tokens hold 600 blocks of 60 tokens; between 12,000 and 36,000 the floor falls linearly.
    expect(c.planFor(36_000).limit).toBe(600);
    expect(ROOMY_FLOOR_SHARE).toBe(0.01);
    expect(c.planFor(36_000).floor).toBeCloseTo(0.0015, 12);
    expect(c.planFor(200_000).floor).toBeCloseTo(0.0015, 12);
    expect(c.planFor(24_000).floor).toBeCloseTo(0.07575, 12);
    // Above 0: a memory that shares no word with the query (relevance 0) is still `filter`.
    expect(c.planFor(200_000).floor).toBeGreaterThan(0);
  });

  it('sizes to the learned memory cost: larger memories ask for fewer candidates at the same budget', () => {
    const c = new CandidateLimit(600, 0.15);
    const before = c.planFor(4000).limit;
    for (let i = 0; i < 200; i++) c.observe(hits(10, 1080)); // 270 content tokens + 30 of wrapper
    expect(c.planFor(4000).limit).toBeLessThan(before);
    // The running mean nears 270 content tokens: 3 × 4,000 / 300 = 40.
    expect(c.planFor(4000).limit).toBeGreaterThanOrEqual(40);
    expect(c.planFor(4000).limit).toBeLessThanOrEqual(41);
  });
});
