/**
 * bench:load's per-step tail line (bench/lib/load-step.ts `tailBesideMarkCompacts`): the driver's tail
 * incidents beside the main thread's mark-compacts of the same window (where the p99 comes from).
 */
import { describe, expect, it } from 'vitest';
import { type StepRow, tailBesideMarkCompacts } from '../../../bench/lib/load-step.js';
import { tailIncidents } from '../../../src/tools/client/tail-incidents.js';

function row(tail: StepRow['tail'], major: { count: number; ms: number } | undefined): StepRow {
  const by_kind = major ? { major, minor: { count: 150, ms: 500 } } : { minor: { count: 150, ms: 500 } };
  return {
    tail,
    server: { window_s: 20, gc: { ms_per_s: 30, major_per_s: 0.5, by_kind } },
  } as unknown as StepRow;
}

describe('tailBesideMarkCompacts', () => {
  const bursts = [0, 2_000, 4_000].flatMap((from) =>
    Array.from({ length: 20 }, (_, i) => ({ at: from + i, ms: 30 })),
  );
  const tail = tailIncidents(bursts, 20_000, 20);

  it('puts the mark-compacts of the window beside the tail: count, period, pause', () => {
    expect(tailBesideMarkCompacts(row(tail, { count: 10, ms: 120 }))).toBe(
      'tail (> 20 ms): 60 calls (0.3 %) in 3 incidents; 3 of ≥ 10 calls hold 60, every 2.0 s (median); ' +
        'largest 20 calls over 19 ms, up to 30 ms; main-thread mark-compacts: 10 (every 2.0 s, 12.0 ms pause each)',
    );
  });

  it('says when there were none, and when a result file predates the tail', () => {
    expect(tailBesideMarkCompacts(row(tail, undefined))).toMatch(/; main-thread mark-compacts: none$/);
    expect(tailBesideMarkCompacts(row(undefined, { count: 4, ms: 100 }))).toBe(
      'tail: not recorded; main-thread mark-compacts: 4 (every 5.0 s, 25.0 ms pause each)',
    );
  });
});
