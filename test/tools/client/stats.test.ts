import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { percentilesOf, sampleStats } from '../../../src/tools/client/stats.js';

describe('percentilesOf: the one percentile estimator (hdr-histogram-js)', () => {
  it('integers at resolution 1 come back exact: 1..100 has p50 = 50, p99 = 99, p100 = 100', () => {
    const at = percentilesOf(
      Array.from({ length: 100 }, (_, i) => 100 - i),
      1,
    );
    expect([at(50), at(99), at(100)]).toEqual([50, 99, 100]);
  });

  it('ms samples are kept to the µs: 1.234 and 56.789 ms', () => {
    const at = percentilesOf([1.234, 56.789]);
    expect(at(0)).toBe(1.234);
    // 56789 µs lies in an hdr bucket 32 µs wide at 3 significant digits; its top value is capped at the
    // largest sample.
    expect(at(100)).toBe(56.789);
    expect(at(99)).toBe(56.789);
  });

  it('property: no percentile exceeds the largest sample (a p99 is never printed above the max)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 10_000, noNaN: true }), { minLength: 1, maxLength: 200 }),
        (xs) => {
          const at = percentilesOf(xs);
          const max = Math.max(...xs.map((x) => Math.round(x * 1000))) / 1000;
          for (const p of [50, 99, 99.9, 100]) expect(at(p)).toBeLessThanOrEqual(max);
        },
      ),
    );
  });

  it('no samples ⇒ 0 for every percentile', () => {
    expect(percentilesOf([])(99)).toBe(0);
  });

  it('property: every percentile lies within 0.1 % of one of the samples, and is monotonic in p', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0.001, max: 10_000, noNaN: true }), { minLength: 1, maxLength: 200 }),
        fc.double({ min: 0, max: 100, noNaN: true }),
        (xs, p) => {
          const at = percentilesOf(xs);
          const v = at(p);
          const near = xs.some((x) => {
            const recorded = Math.round(x * 1000) / 1000;
            // hdr answers a value of the sample's bucket: its top, or its bottom for p = 0.
            return Math.abs(v - recorded) <= recorded * 0.001 + 0.001;
          });
          expect(near).toBe(true);
          expect(at(Math.min(100, p + 1))).toBeGreaterThanOrEqual(v);
        },
      ),
    );
  });

  it('sampleStats of per-second counts: exact percentiles, population stdev', () => {
    expect(sampleStats([10, 20, 30, 40])).toEqual({
      p1: 10,
      p2_5: 10,
      p50: 20,
      p97_5: 40,
      avg: 25,
      stdev: 11.18,
      min: 10,
      max: 40,
    });
  });
});
