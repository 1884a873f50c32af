/**
 * Fake time for deadline tests: vitest's fake timers plus an injected clock (ms) that the test moves, so a
 * timer and the clock it is checked against can be made to disagree (a timer that fires early).
 */
import { afterEach, beforeEach, vi } from 'vitest';

/** What {@link useFakeClock} hands a test file. */
export interface FakeClock {
  /** The injected clock: the current fake time, ms. */
  readonly clock: () => number;
  /** The fake time, ms; settable (moves the clock only, not the timers). */
  now: number;
  /** Moves the clock and the fake timers together by `ms`. */
  advance(ms: number): void;
}

/** Every timer function but setImmediate/clearImmediate (see {@link useFakeClock}). */
const FAKED = [
  'setTimeout',
  'clearTimeout',
  'setInterval',
  'clearInterval',
  'Date',
  'performance',
  'hrtime',
] as const;

/** Fake timers for every test of the calling suite, the clock starting at `startMs` each time. */
export function useFakeClock(startMs: number): FakeClock {
  const fake: FakeClock = {
    now: startMs,
    clock: () => fake.now,
    advance(ms) {
      fake.now += ms;
      vi.advanceTimersByTime(ms);
    },
  };
  beforeEach(() => {
    // setImmediate stays real: a deadline decided after the loop's poll (util/clock.ts afterPendingIo) is
    // decided on the test's next await, with the fake time it fired at (fake timers would queue it 1 ms on).
    vi.useFakeTimers({ toFake: [...FAKED] });
    fake.now = startMs;
  });
  afterEach(() => {
    vi.useRealTimers();
  });
  return fake;
}
