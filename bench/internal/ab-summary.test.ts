/**
 * bench:internal ab's summary (bench/internal/lib/ab-summary.ts): medians per thread group over the rounds, and paired
 * per-round differences from the first build, with two builds that may be the same checkout.
 */
import { describe, expect, it } from 'vitest';
import { type AbStep, summariseAb } from './lib/ab-summary.js';

function step(round: number, build: number, main: number, p99 = 10): AbStep {
  const ms = { main, pool: main / 2, store: 0.5, other: 0.1, total: main + main / 2 + 0.6 };
  return { round, build, ms_per_call: ms, p50_ms: 2, p99_ms: p99, errors: 0, degraded: 0 };
}

describe('summariseAb', () => {
  it('gives medians per build and the median of the per-round differences from the first build', () => {
    // Build 1 is 0.1 ms cheaper on the main thread in rounds 0 and 1 and 0.3 ms dearer in round 2.
    const steps = [
      step(0, 0, 1.0, 30),
      step(0, 1, 0.9, 20),
      step(1, 1, 1.1, 40),
      step(1, 0, 1.2, 50),
      step(2, 0, 0.8, 10),
      step(2, 1, 1.1, 60),
    ];
    const [first, second] = summariseAb(2, steps);
    expect(first!.build).toBe(0);
    expect(first!.median_ms_per_call.main).toBe(1);
    expect(first!.p99_ms_median).toBe(30);
    expect(first!.vs_first).toBeUndefined();
    expect(second!.median_ms_per_call.main).toBe(1.1);
    expect(second!.p99_ms_median).toBe(40);
    expect(second!.vs_first!.main).toEqual({ median_diff_ms: -0.1, rounds_lower: 2, rounds: 3 });
    expect(second!.vs_first!.pool).toEqual({ median_diff_ms: -0.05, rounds_lower: 2, rounds: 3 });
    expect(second!.vs_first!.store).toEqual({ median_diff_ms: 0, rounds_lower: 0, rounds: 3 });
  });

  it('pairs only the rounds both builds measured, and leaves out steps without calls', () => {
    const steps: AbStep[] = [
      step(0, 0, 1.0),
      { ...step(0, 1, 0.5), ms_per_call: null },
      step(1, 0, 1.0),
      step(1, 1, 1.4),
      step(2, 1, 0.2),
    ];
    const [, second] = summariseAb(2, steps);
    expect(second!.median_ms_per_call.main).toBe(0.8);
    expect(second!.vs_first!.main).toEqual({ median_diff_ms: 0.4, rounds_lower: 0, rounds: 1 });
  });
});
