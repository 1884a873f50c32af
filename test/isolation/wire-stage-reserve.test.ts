/**
 * Issue 9 item 4: the share of D kept after retrieval is measured (running p99s), not a fixed 5 ms.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  PRIOR_DEGRADED_MS,
  PRIOR_DEGRADED_MS_PER_MIB,
  PRIOR_LATENESS_MS,
  RESERVE_WINDOW,
  RunningP99,
  StageReserve,
} from '../../src/server/stage-reserve.js';

describe('RunningP99', () => {
  it('is the nearest-rank p99 of the last 256 samples', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 1000, noNaN: true }), { minLength: 1, maxLength: 600 }),
        (xs) => {
          const p = new RunningP99();
          for (const x of xs) p.record(x);
          // Recomputed every 16 samples: compare with the window as it was at the last recompute.
          const upTo = xs.length <= 16 ? xs.length : xs.length - ((xs.length - 16) % 16);
          const window = xs.slice(Math.max(0, upTo - RESERVE_WINDOW), upTo).sort((a, b) => a - b);
          expect(p.p99).toBe(window[Math.ceil(0.99 * window.length) - 1]);
        },
      ),
    );
  });

  it('ignores negative and non-finite samples', () => {
    const p = new RunningP99();
    for (const x of [-1, Number.NaN, Number.POSITIVE_INFINITY]) p.record(x);
    expect(p.p99).toBe(0);
  });
});

describe('StageReserve', () => {
  it('keeps priors before anything is measured: a cold degraded answer, a late timer, a cost per MiB', () => {
    const r = new StageReserve(5);
    const cold = PRIOR_DEGRADED_MS + PRIOR_LATENESS_MS;
    expect(r.degradedMs()).toBe(1.5 * cold + 1);
    expect(r.degradedMs()).toBe(14.5);
    expect(r.degradedMs(4 * 1024 * 1024)).toBe(1.5 * (cold + 4 * PRIOR_DEGRADED_MS_PER_MIB) + 1);
    expect(r.cpuShareMs(45)).toBe(14.5);
  });

  it('a measurement replaces its prior, even a measured 0', () => {
    const r = new StageReserve(5);
    r.lateness.record(0);
    expect(r.degradedMs()).toBe(1.5 * PRIOR_DEGRADED_MS + 1);
    r.recordDegraded(0.2, 1000);
    // 1.5 × 0.2 + 1 = 1.3: the 5 ms floor.
    expect(r.degradedMs()).toBe(5);
  });

  it('grows with measured round-trips, degraded costs and timer lateness, capped at half of what is left', () => {
    const r = new StageReserve(5);
    r.roundTrip.record(10);
    r.recordDegraded(2, 1000);
    r.lateness.record(3);
    expect(r.degradedMs()).toBe(1.5 * (2 + 3) + 1);
    expect(r.cpuShareMs(2000)).toBe(1.5 * 10 + 1.5 * (2 + 3) + 1);
    expect(r.cpuShareMs(40)).toBe(20);
    r.recordDegraded(8, 2 * 1024 * 1024); // 4 ms per MiB replaces the prior
    expect(r.degradedMs(1024 * 1024)).toBe(1.5 * (2 + 4 + 3) + 1);
  });

  it('judges a degraded answer too late only for histories of 256 KiB and more whose per-MiB cost exceeds what is left', () => {
    const r = new StageReserve(5);
    const MiB = 1024 * 1024;
    // Small histories are never refused, however little time is left.
    expect(r.degradedTooLate(0, 256 * 1024 - 1)).toBe(false);
    // The prior per MiB until measured.
    expect(r.degradedTooLate(4 * PRIOR_DEGRADED_MS_PER_MIB - 0.1, 4 * MiB)).toBe(true);
    expect(r.degradedTooLate(4 * PRIOR_DEGRADED_MS_PER_MIB, 4 * MiB)).toBe(false);
    r.recordDegraded(8, 2 * MiB); // 4 ms per MiB measured: 10 MiB needs 40 ms
    expect(r.degradedTooLate(39.9, 10 * MiB)).toBe(true);
    expect(r.degradedTooLate(40, 10 * MiB)).toBe(false);
    // A CPU-stage run over a large history teaches the same per-MiB cost; over a small one it does not.
    const s = new StageReserve(5);
    s.recordStageRun(1, 1000);
    expect(s.degradedTooLate(4 * PRIOR_DEGRADED_MS_PER_MIB - 0.1, 4 * MiB)).toBe(true);
    s.recordStageRun(3, 1 * MiB); // 3 ms per MiB: 4 MiB needs 12 ms
    expect(s.degradedTooLate(11.9, 4 * MiB)).toBe(true);
    expect(s.degradedTooLate(12, 4 * MiB)).toBe(false);
  });

  it('leaves the CPU stage the wall overrun as measured (event-loop delay), capped at half of what is left', () => {
    const r = new StageReserve(5);
    r.roundTrip.record(10);
    r.wallOverrun.record(4);
    expect(r.cpuShareMs(2000)).toBe(1.5 * (10 + 4) + 1.5 * (PRIOR_DEGRADED_MS + PRIOR_LATENESS_MS) + 1);
    expect(r.cpuShareMs(40)).toBe(20);
  });

  it('fits a CPU task only with at least the measured round-trip p99 (anything before a measurement)', () => {
    const r = new StageReserve(5);
    expect(r.cpuStageFits(0)).toBe(true);
    r.roundTrip.record(10);
    expect(r.cpuStageFits(9.9)).toBe(false);
    expect(r.cpuStageFits(10)).toBe(true);
  });
});
