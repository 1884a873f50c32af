/**
 * The one deadline timer (issue 14 item 1): `armAt` runs its callback no earlier than the deadline on the
 * injected clock (a timer that fires early re-arms for what is left, issue 9 item 4), at once when the
 * deadline has passed, never for `Infinity`, and not after `cancel()`.
 */
import { describe, expect, it, vi } from 'vitest';
import { armAt, monotonicNow } from '../../src/util/clock.js';
import { useFakeClock } from '../helpers/fake-clock.js';

describe('armAt on fake timers and an injected clock', () => {
  const fake = useFakeClock(1_000);
  const { clock } = fake;

  it('a timer that fires before the deadline on the clock re-arms for the rest: never early', () => {
    const fired: number[] = [];
    armAt(1_010.4, () => fired.push(fake.now), { clock });
    // The timer fires after ceil(10.4) = 11 ms of timer time, but the clock has only reached 1,009.9
    // (libuv's cached loop time lagging the clock): not yet.
    fake.now = 1_009.9;
    vi.advanceTimersByTime(11);
    expect(fired).toEqual([]);
    expect(vi.getTimerCount()).toBe(1);
    fake.now = 1_010.4;
    vi.advanceTimersByTime(1);
    expect(fired).toEqual([1_010.4]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('runs once, synchronously, when the deadline has already passed', () => {
    let runs = 0;
    armAt(999, () => runs++, { clock });
    expect(runs).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(1_000);
    expect(runs).toBe(1);
  });

  it('holds no timer for an infinite deadline', () => {
    let runs = 0;
    armAt(Number.POSITIVE_INFINITY, () => runs++, { clock });
    expect(vi.getTimerCount()).toBe(0);
    expect(runs).toBe(0);
  });

  it('cancel() stops it, including after an early re-arm, and is idempotent', () => {
    let runs = 0;
    const t = armAt(1_005, () => runs++, { clock });
    vi.advanceTimersByTime(5); // clock still at 1,000: re-armed
    expect(vi.getTimerCount()).toBe(1);
    t.cancel();
    t.cancel();
    expect(vi.getTimerCount()).toBe(0);
    fake.now = 2_000;
    vi.advanceTimersByTime(10_000);
    expect(runs).toBe(0);
  });

  it('reaches a deadline beyond the 2^31 − 1 ms timer cap in steps', () => {
    let runs = 0;
    const far = 1_000 + 3_000_000_000;
    armAt(far, () => runs++, { clock });
    fake.now = 1_000 + 2_147_483_647;
    vi.advanceTimersByTime(2_147_483_647);
    expect(runs).toBe(0);
    fake.now = far;
    vi.advanceTimersByTime(3_000_000_000 - 2_147_483_647);
    expect(runs).toBe(1);
  });
});

describe('monotonicNow', () => {
  it('is performance.timeOrigin + performance.now() and never goes back', () => {
    const a = monotonicNow();
    const b = performance.timeOrigin + performance.now();
    const c = monotonicNow();
    expect(a).toBeLessThanOrEqual(b);
    expect(b).toBeLessThanOrEqual(c);
  });
});
