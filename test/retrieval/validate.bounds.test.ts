/**
 * The memory-service answer bounds: the code-point cap check (no allocation, reads at most 2 × max + 1
 * units), the limit cut in validateHits, the body cap, and the branch detail that reports them.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeMemoryBody,
  droppedDetail,
  exceedsCodePoints,
  maxBodyBytes,
  validateHits,
} from '../../src/retrieval/validate.js';
import { memoryHit } from '../helpers/memory-hit.js';

const ORG = '11111111-1111-4111-8111-111111111111';
const AGENT = '22222222-2222-4222-8222-222222222222';

const hit = (content: string, i = 1) =>
  memoryHit(content, i, { org: ORG, agent: AGENT, confidence: 0.5, similarity: 0.5, source: 'unit' });

describe('exceedsCodePoints', () => {
  it('agrees with counting code points by iteration, for any text (astral and lone surrogates too)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: 'grapheme', maxLength: 60 }),
          fc.string({ unit: 'binary', maxLength: 60 }),
        ),
        fc.integer({ min: 0, max: 70 }),
        (text, max) => {
          expect(exceedsCodePoints(text, max)).toBe([...text].length > max);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('is exact at the 65,536 cap with emoji (two UTF-16 units each)', () => {
    expect(exceedsCodePoints('😀'.repeat(65_536), 65_536)).toBe(false);
    expect(exceedsCodePoints('😀'.repeat(65_537), 65_536)).toBe(true);
    expect(exceedsCodePoints(`${'😀'.repeat(65_535)}ab`, 65_536)).toBe(true);
  });
});

describe('validateHits bounds', () => {
  it('looks at only the first `limit` items and counts the rest as ignored', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 60 }), fc.integer({ min: 0, max: 30 }), (n, limit) => {
        const items = Array.from({ length: n }, (_, i) => hit(`m${i}`, i + 1));
        const v = validateHits(items, ORG, AGENT, { limit, maxChars: 100 });
        expect(v.hits.map((h) => h.rank)).toEqual(items.slice(0, limit).map((h) => h.rank));
        expect(v.ignored).toBe(Math.max(0, n - limit));
        expect(v.invalid + v.foreign + v.oversize).toBe(0);
      }),
    );
  });

  it('drops content over maxChars as oversize, before scoping, and never an invalid item as oversize', () => {
    const items = [hit('abcd', 1), hit('abcde', 2), { ...hit('abcdef', 3), rank: 0 }, hit('ab', 4)];
    const v = validateHits(items, ORG, AGENT, { limit: 20, maxChars: 4 });
    expect(v.hits.map((h) => h.rank)).toEqual([1, 4]);
    expect({ invalid: v.invalid, oversize: v.oversize, foreign: v.foreign, ignored: v.ignored }).toEqual({
      invalid: 1,
      oversize: 1,
      foreign: 0,
      ignored: 0,
    });
  });

  it('decodeMemoryBody: the same bounds on raw bytes, and the contract errors for bad bodies', () => {
    const body = new TextEncoder().encode(
      JSON.stringify({ data: { results: [hit('ok', 1), hit('too long', 2), hit('ok', 3)] } }),
    );
    const v = decodeMemoryBody(body, ORG, AGENT, { limit: 2, maxChars: 5 });
    expect(v.hits.map((h) => h.rank)).toEqual([1]);
    expect([v.oversize, v.ignored]).toEqual([1, 1]);
    expect(() =>
      decodeMemoryBody(new TextEncoder().encode('{'), ORG, AGENT, { limit: 2, maxChars: 5 }),
    ).toThrow('invalid JSON');
    expect(() =>
      decodeMemoryBody(new TextEncoder().encode('[]'), ORG, AGENT, { limit: 2, maxChars: 5 }),
    ).toThrow('bad shape: body is not an object');
  });
});

describe('body cap and detail', () => {
  it('derives the cap from limit and the memory cap: 7,947,264 bytes hot, 3,974,144 cold by default', () => {
    expect(maxBodyBytes(20, 65_536)).toBe(7_947_264);
    expect(maxBodyBytes(10, 65_536)).toBe(3_974_144);
    expect(maxBodyBytes(20, 1000)).toBe(1024 + 20 * (6000 + 4096));
  });

  it('names what was dropped and what was ignored', () => {
    expect(droppedDetail(0, 0, 0, 0)).toBe('');
    expect(droppedDetail(0, 0, 3, 0)).toBe('dropped 3 oversize');
    expect(droppedDetail(0, 0, 0, 4980)).toBe('ignored 4980 past limit');
    expect(droppedDetail(1, 2, 3, 4)).toBe('dropped 1 invalid, 2 foreign, 3 oversize; ignored 4 past limit');
  });
});
