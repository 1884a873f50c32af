/**
 * The share of D kept after retrieval is measured (running p99s), not a fixed 5 ms.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import * as reserve from '../../src/request/stage-reserve.js';

describe('RunningP99', () => {
  it('is the nearest-rank p99 and median of the last 256 samples', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 1000, noNaN: true }), { minLength: 1, maxLength: 600 }),
        (xs) => {
          const p = new reserve.RunningP99();
          for (const x of xs) p.record(x);
          // Recomputed every 16 samples: compare with the window as it was at the last recompute.
          const upTo = xs.length <= 16 ? xs.length : xs.length - ((xs.length - 16) % 16);
          const window = xs.slice(Math.max(0, upTo - reserve.RESERVE_WINDOW), upTo).sort((a, b) => a - b);
          expect(p.p99).toBe(window[Math.ceil(0.99 * window.length) - 1]);
          expect(p.p50).toBe(window[Math.ceil(0.5 * window.length) - 1]);
        },
      ),
    );
  });

  it('forgets everything on clear(): count, p99 and median 0, the next sample recomputed at once', () => {
    const p = new reserve.RunningP99();
    for (let i = 0; i < 40; i++) p.record(100);
    p.clear();
    expect([p.count, p.p99, p.p50]).toEqual([0, 0, 0]);
    p.record(3);
    expect([p.count, p.p99, p.p50]).toEqual([1, 3, 3]);
  });

  it('ignores negative and non-finite samples', () => {
    const p = new reserve.RunningP99();
    for (const x of [-1, Number.NaN, Number.POSITIVE_INFINITY]) p.record(x);
    expect(p.p99).toBe(0);
  });
});

describe('StageReserve', () => {
  it('keeps priors before anything is measured: a cold degraded answer, a late timer, a cost per MiB', () => {
    const r = new reserve.StageReserve(5);
    const cold = reserve.PRIOR_DEGRADED_MS + reserve.PRIOR_LATENESS_MS;
    expect(r.degradedMs()).toBe(1.5 * cold + 1);
    expect(r.degradedMs()).toBe(14.5);
    expect(r.degradedMs(4 * 1024 * 1024)).toBe(1.5 * (cold + 4 * reserve.PRIOR_DEGRADED_MS_PER_MIB) + 1);
    expect(r.cpuShareMs(45)).toBe(14.5);
  });

  it('a measurement replaces its prior, even a measured 0', () => {
    const r = new reserve.StageReserve(5);
    r.lateness.record(0);
    expect(r.degradedMs()).toBe(1.5 * reserve.PRIOR_DEGRADED_MS + 1);
    r.recordDegraded(0.2, 1000);
    // 1.5 × 0.2 + 1 = 1.3: the 5 ms floor.
    expect(r.degradedMs()).toBe(5);
  });

  it('grows with measured round-trips, degraded costs and timer lateness, capped at half of what is left', () => {
    const r = new reserve.StageReserve(5);
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
    const r = new reserve.StageReserve(5);
    const MiB = 1024 * 1024;
    // Small histories are never refused, however little time is left.
    expect(r.degradedTooLate(0, 256 * 1024 - 1)).toBe(false);
    // The prior per MiB until measured.
    expect(r.degradedTooLate(4 * reserve.PRIOR_DEGRADED_MS_PER_MIB - 0.1, 4 * MiB)).toBe(true);
    expect(r.degradedTooLate(4 * reserve.PRIOR_DEGRADED_MS_PER_MIB, 4 * MiB)).toBe(false);
    // 4 ms per MiB measured three times (REFUSAL_MIN_SAMPLES): 10 MiB needs 40 ms.
    for (let i = 0; i < reserve.REFUSAL_MIN_SAMPLES; i++) r.recordDegraded(8, 2 * MiB);
    expect(r.degradedTooLate(39.9, 10 * MiB)).toBe(true);
    expect(r.degradedTooLate(40, 10 * MiB)).toBe(false);
  });

  it('takes CPU-stage runs as an upper bound of the degraded cost: below the prior only, never above it', () => {
    const MiB = 1024 * 1024;
    // Stage runs over small histories teach nothing per MiB.
    const s = new reserve.StageReserve(5);
    for (let i = 0; i < reserve.REFUSAL_MIN_SAMPLES; i++) s.recordStageRun(1, 1000);
    expect(s.stagePerMiB.count).toBe(0);
    expect(s.refusalPerMiB()).toBe(reserve.PRIOR_DEGRADED_MS_PER_MIB);
    // Stage runs at 1 ms per MiB: a degraded answer costs at most that, so 4 MiB needs at most 4 ms.
    for (let i = 0; i < reserve.REFUSAL_MIN_SAMPLES; i++) s.recordStageRun(1, 1 * MiB);
    expect(s.refusalPerMiB()).toBe(1);
    expect(s.degradedTooLate(3.9, 4 * MiB)).toBe(true);
    expect(s.degradedTooLate(4, 4 * MiB)).toBe(false);
    // Stage runs at 300 ms per MiB say nothing about the degraded answer's cost: the prior stands (before
    // this rule, 9.4 MiB with 1 s left was refused although its degraded answer needs ~10 ms here).
    const slow = new reserve.StageReserve(5);
    for (let i = 0; i < 5; i++) slow.recordStageRun(1200, 4 * MiB);
    expect(slow.refusalPerMiB()).toBe(reserve.PRIOR_DEGRADED_MS_PER_MIB);
    expect(slow.degradedTooLate(1000, 9.4 * MiB)).toBe(false);
    // …and measured degraded answers replace both.
    for (let i = 0; i < reserve.REFUSAL_MIN_SAMPLES; i++) slow.recordDegraded(4 * 0.5, 4 * MiB);
    expect(slow.refusalPerMiB()).toBe(0.5);
  });

  it('keeps the degraded reserve from degraded answers only: stage runs (worker time) never lower it', () => {
    const MiB = 1024 * 1024;
    const cold = reserve.PRIOR_DEGRADED_MS + reserve.PRIOR_LATENESS_MS;
    const r = new reserve.StageReserve(5);
    r.recordStageRun(0.5 * 4, 4 * MiB);
    expect(r.degradedMs(2 * MiB)).toBe(1.5 * (cold + 2 * reserve.PRIOR_DEGRADED_MS_PER_MIB) + 1);
    r.recordDegraded(3 * 4, 4 * MiB);
    expect(r.degradedMs(2 * MiB)).toBe(1.5 * (cold + 2 * 3) + 1);
  });

  it('judges by the prior until REFUSAL_MIN_SAMPLES per-MiB samples: one cold first answer refuses nothing', () => {
    const r = new reserve.StageReserve(5);
    const MiB = 1024 * 1024;
    // A first degraded answer over 9.4 MiB that took 2 s (cold code, a preemption): 213 ms per MiB.
    r.recordDegraded(2000, 9.4 * MiB);
    r.recordDegraded(2000, 9.4 * MiB);
    expect(r.refusalPerMiB()).toBe(reserve.PRIOR_DEGRADED_MS_PER_MIB);
    expect(r.degradedTooLate(1500, 9.4 * MiB)).toBe(false);
    r.recordDegraded(2000, 9.4 * MiB);
    expect(r.degradedTooLate(1500, 9.4 * MiB)).toBe(true);
    expect(r.degradedTooLate(2000, 9.4 * MiB)).toBe(false);
  });

  it('one slow answer among fast ones refuses nothing, though it is the p99 the reserve keeps', () => {
    const r = new reserve.StageReserve(5);
    const MiB = 1024 * 1024;
    for (let i = 0; i < 15; i++) r.recordDegraded(20, 4 * MiB); // 5 ms per MiB
    r.recordDegraded(2000, 4 * MiB); // 500 ms per MiB: a GC or a preemption in one answer
    expect(r.degradedPerMiB.p99).toBe(500);
    expect(r.refusalPerMiB()).toBe(5);
    // 9.4 MiB with 1 s left: a typical answer takes 47 ms, so it is not refused.
    expect(r.degradedTooLate(1000, 9.4 * MiB)).toBe(false);
    // The reserve still keeps the p99 (with headroom) for such a call.
    expect(r.degradedMs(9.4 * MiB)).toBeCloseTo(
      1.5 * (reserve.PRIOR_DEGRADED_MS + 9.4 * 500 + reserve.PRIOR_LATENESS_MS) + 1,
      9,
    );
  });

  it('forgets per-MiB costs REFUSAL_MEMORY_MS after the newest: a slow period does not refuse for ever', () => {
    let now = 1000;
    const r = new reserve.StageReserve(5, () => now);
    const MiB = 1024 * 1024;
    // A slow period: every large degraded answer at 300 ms per MiB, so 9.4 MiB with 1.5 s left is refused.
    for (let i = 0; i < 5; i++) r.recordDegraded(300 * 4, 4 * MiB);
    expect(r.refusalPerMiB()).toBe(300);
    expect(r.degradedTooLate(1500, 9.4 * MiB)).toBe(true);
    // Refused calls record nothing; until REFUSAL_MEMORY_MS has passed the refusal stands…
    now += reserve.REFUSAL_MEMORY_MS;
    expect(r.degradedTooLate(1500, 9.4 * MiB)).toBe(true);
    // …then one call is judged by the prior again and runs, and its answer is the fresh measurement.
    now += 1;
    expect(r.refusalPerMiB()).toBe(reserve.PRIOR_DEGRADED_MS_PER_MIB);
    expect(r.degradedTooLate(1500, 9.4 * MiB)).toBe(false);
    // 10 ms per MiB, the machine is quiet again: the stale window was emptied, so the five slow samples
    // do not count as fresh again; until REFUSAL_MIN_SAMPLES new ones, the prior.
    r.recordDegraded(40, 4 * MiB);
    expect(r.degradedPerMiB.count).toBe(1);
    expect(r.refusalPerMiB()).toBe(reserve.PRIOR_DEGRADED_MS_PER_MIB);
    r.recordDegraded(40, 4 * MiB);
    r.recordDegraded(40, 4 * MiB);
    expect(r.refusalPerMiB()).toBe(10);
    expect(r.degradedTooLate(1500, 9.4 * MiB)).toBe(false);
  });

  it("judges a large CPU task too long by the stage runs' fresh median per MiB with headroom, once it has REFUSAL_MIN_SAMPLES", () => {
    let now = 1000;
    const r = new reserve.StageReserve(5, () => now);
    const MiB = 1024 * 1024;
    // Nothing measured: every task is submitted.
    expect(r.stageTooLong(0, 9.4 * MiB)).toBe(false);
    // 5 ms per MiB (two runs, then a third): 9.4 MiB needs 47 ms, 70.5 ms with headroom ×1.5.
    r.recordStageRun(20, 4 * MiB);
    r.recordStageRun(20, 4 * MiB);
    expect(r.stageTooLong(70.4, 9.4 * MiB)).toBe(false);
    r.recordStageRun(20, 4 * MiB);
    expect(r.stageTooLong(70.4, 9.4 * MiB)).toBe(true);
    expect(r.stageTooLong(70.5, 9.4 * MiB)).toBe(false);
    // Histories under 256 KiB are never judged so, whatever the window says.
    expect(r.stageTooLong(0, 256 * 1024 - 1)).toBe(false);
    // Skipped tasks teach nothing: REFUSAL_MEMORY_MS after the newest run, one is submitted again, and
    // its run starts a new window (the old runs do not come back as fresh).
    now += reserve.REFUSAL_MEMORY_MS + 1;
    expect(r.stageTooLong(70.4, 9.4 * MiB)).toBe(false);
    r.recordStageRun(4, 4 * MiB);
    expect(r.stagePerMiB.count).toBe(1);
    expect(r.stageTooLong(1, 9.4 * MiB)).toBe(false);
  });

  it('leaves the CPU stage the wall overrun as measured (event-loop delay), capped at half of what is left', () => {
    const r = new reserve.StageReserve(5);
    r.roundTrip.record(10);
    r.wallOverrun.record(4);
    expect(r.cpuShareMs(2000)).toBe(
      1.5 * (10 + 4) + 1.5 * (reserve.PRIOR_DEGRADED_MS + reserve.PRIOR_LATENESS_MS) + 1,
    );
    expect(r.cpuShareMs(40)).toBe(20);
  });

  it('fits a CPU task only with at least the measured round-trip p99 (anything before a measurement)', () => {
    const r = new reserve.StageReserve(5);
    expect(r.cpuStageFits(0)).toBe(true);
    r.roundTrip.record(10);
    expect(r.cpuStageFits(9.9)).toBe(false);
    expect(r.cpuStageFits(10)).toBe(true);
  });
});
