/**
 * The load report's `tail` (where a run's p99 comes from): slow calls grouped into incidents
 * by intended send time. Exact values on hand-made runs, partition invariants on random ones.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatTail } from '../../../src/tools/client/load-report.js';
import {
  INCIDENT_GAP_MS,
  LARGE_INCIDENT_CALLS,
  type SlowCall,
  tailIncidents,
} from '../../../src/tools/client/tail-incidents.js';

/** `n` slow calls 1 ms apart from `from`, latencies `ms`, `ms + 1`, …, sent `lag` ms late. */
function burst(from: number, n: number, ms: number, lag = 0): SlowCall[] {
  return Array.from({ length: n }, (_, i) => ({ at: from + i, ms: ms + i, lag }));
}

describe('tailIncidents', () => {
  it('groups a periodic tail into its incidents and times the large ones', () => {
    // Three bursts of 12 calls, 2,000 ms apart (a periodic stall), and two lone slow calls between them.
    const slow = [
      ...burst(1_000, 12, 25),
      { at: 1_500, ms: 21 },
      // The driver stalled in this one: it sent these calls 15 ms late (over half the threshold).
      ...burst(3_000, 12, 30, 15),
      { at: 4_000, ms: 22, lag: 40 },
      ...burst(5_010, 12, 40),
    ];
    // Any order in: the report sorts by send time.
    const t = tailIncidents([...slow].reverse(), 2_000, 20);
    expect(t).toEqual({
      threshold_ms: 20,
      gap_ms: INCIDENT_GAP_MS,
      slow_calls: 38,
      slow_share: 0.019,
      incidents: 5,
      large_incidents: 3,
      calls_in_large_incidents: 36,
      // Starts 1,000 → 3,000 → 5,010: periods 2,000 and 2,010, median 2,005.
      large_period_ms: 2005,
      // Only large incidents count: the lone call sent 40 ms late is not one.
      driver_late_large_incidents: 1,
      // Equal sizes: the earliest; its span is first to last send, its worst latency 25 + 11.
      largest: { calls: 12, span_ms: 11, max_ms: 36, max_send_lag_ms: 0 },
    });
    expect(formatTail(t)).toBe(
      'tail (> 20 ms): 38 calls (1.9 %) in 5 incidents; 3 of ≥ 10 calls hold 36, every 2.0 s (median) ' +
        '(1 with the driver late); largest 12 calls over 11 ms, up to 36 ms',
    );
  });

  it('joins calls exactly gap ms apart and splits them one ms further', () => {
    const at = (xs: number[]) => xs.map((x) => ({ at: x, ms: 30 }));
    expect(tailIncidents(at([0, 50, 100]), 3, 20).incidents).toBe(1);
    expect(tailIncidents(at([0, 51, 102]), 3, 20).incidents).toBe(3);
    expect(tailIncidents(at([0, 10, 20]), 3, 20, 5).incidents).toBe(3);
  });

  it('reports an empty tail, no period for one large incident, and refuses a bad gap', () => {
    expect(tailIncidents([], 0, 20)).toEqual({
      threshold_ms: 20,
      gap_ms: INCIDENT_GAP_MS,
      slow_calls: 0,
      slow_share: 0,
      incidents: 0,
      large_incidents: 0,
      calls_in_large_incidents: 0,
      large_period_ms: null,
      driver_late_large_incidents: 0,
      largest: null,
    });
    expect(formatTail(tailIncidents([], 100, 20))).toBe('tail (> 20 ms): 0 calls (0.0 %)');
    const one = tailIncidents(burst(0, LARGE_INCIDENT_CALLS, 50), 100, 20);
    expect(one.large_incidents).toBe(1);
    expect(one.large_period_ms).toBeNull();
    expect(formatTail(one)).toBe(
      'tail (> 20 ms): 10 calls (10.0 %) in 1 incident; 1 of ≥ 10 calls hold 10; largest 10 calls over 9 ms, ' +
        'up to 59 ms',
    );
    // One slow call: no large-incident part, singular words, the driver's lag where it was late.
    expect(formatTail(tailIncidents([{ at: 5, ms: 30.24, lag: 11.9 }], 100, 20))).toBe(
      'tail (> 20 ms): 1 call (1.0 %) in 1 incident; largest: 1 call, 30.2 ms (driver up to 11.9 ms late)',
    );
    expect(() => tailIncidents([], 0, 20, -1)).toThrow(RangeError);
    expect(() => tailIncidents([], 0, 20, Number.NaN)).toThrow(/gap must be ≥ 0/);
  });

  it('partitions every run: incidents hold every slow call, and no two are within the gap', () => {
    const call = fc.record({
      lag: fc.double({ min: 0, max: 100, noNaN: true }),
      at: fc.integer({ min: 0, max: 5_000 }),
      ms: fc.double({ min: 20.001, max: 500, noNaN: true }),
    });
    fc.assert(
      fc.property(fc.array(call, { maxLength: 300 }), fc.integer({ min: 0, max: 200 }), (slow, gap) => {
        const t = tailIncidents(slow, slow.length, 20, gap);
        expect(t.slow_calls).toBe(slow.length);
        // Incidents = 1 + the number of send-time gaps wider than `gap` between consecutive slow calls.
        const sorted = slow.map((c) => c.at).sort((a, b) => a - b);
        const wide = sorted.slice(1).filter((x, i) => x - sorted[i]! > gap).length;
        expect(t.incidents).toBe(slow.length === 0 ? 0 : wide + 1);
        expect(t.large_incidents).toBeLessThanOrEqual(t.incidents);
        expect(t.calls_in_large_incidents).toBeGreaterThanOrEqual(LARGE_INCIDENT_CALLS * t.large_incidents);
        expect(t.calls_in_large_incidents).toBeLessThanOrEqual(slow.length);
        if (slow.length > 0) {
          expect(t.largest!.calls).toBeGreaterThanOrEqual(Math.ceil(slow.length / t.incidents));
          expect(t.largest!.max_ms).toBeLessThanOrEqual(
            Math.round(Math.max(...slow.map((c) => c.ms)) * 10) / 10,
          );
          expect(t.largest!.span_ms).toBeLessThanOrEqual(gap * (t.largest!.calls - 1));
        }
        if (t.large_period_ms !== null) expect(t.large_period_ms).toBeGreaterThan(gap);
        expect(t.driver_late_large_incidents).toBeLessThanOrEqual(t.large_incidents);
      }),
    );
  });
});
