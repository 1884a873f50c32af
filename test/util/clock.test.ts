/**
 * The one deadline timer: `armAt` runs its callback no earlier than the deadline on the
 * injected clock (a timer that fires early re-arms for what is left), at once when the
 * deadline has passed, never for `Infinity`, and not after `cancel()`. A call's DeadlineSet holds all its
 * deadlines on one such timer, and its CallSignal is a listener list without an EventTarget.
 */
import { describe, expect, it, vi } from 'vitest';
import { BranchRace } from '../../src/retrieval/branch-race.js';
import { CallSignal } from '../../src/util/abort.js';
import { armAt, DeadlineSet, monotonicNow } from '../../src/util/clock.js';
import { useFakeClock } from '../helpers/fake-clock.js';

describe('armAt and DeadlineSet on fake timers and an injected clock', () => {
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

  // DeadlineSet: every deadline of a call on one timer.
  it('holds one Node timer whatever the number of deadlines, runs each at its time, in order', () => {
    const set = new DeadlineSet(clock);
    const fired: string[] = [];
    set.at(1_045, () => fired.push('D'));
    set.at(1_040, () => fired.push('wall'));
    set.at(1_015, () => fired.push('hot'));
    set.at(1_044, () => fired.push('pool'));
    expect(vi.getTimerCount()).toBe(1);
    fake.now = 1_015;
    vi.advanceTimersByTime(15);
    expect(fired).toEqual(['hot']);
    expect(vi.getTimerCount()).toBe(1);
    fake.now = 1_045;
    vi.advanceTimersByTime(30);
    expect(fired).toEqual(['hot', 'wall', 'pool', 'D']);
    expect(vi.getTimerCount()).toBe(0);
    expect(set.size).toBe(0);
  });

  it('a cancelled deadline never fires and never wakes the loop: the timer moves to the next one', () => {
    const set = new DeadlineSet(clock);
    const fired: string[] = [];
    const wall = set.at(1_040, () => fired.push('wall'));
    set.at(1_045, () => fired.push('D'));
    wall.cancel();
    expect(vi.getTimerCount()).toBe(1);
    fake.now = 1_040;
    vi.advanceTimersByTime(40);
    // Nothing due at the wall's time: the one timer is armed at D, not at the cancelled wall.
    expect(fired).toEqual([]);
    fake.now = 1_045;
    vi.advanceTimersByTime(5);
    expect(fired).toEqual(['D']);
  });

  it('runs a passed deadline at once from at(), an overdue one from the timer (not inside cancel)', () => {
    const set = new DeadlineSet(clock);
    const fired: string[] = [];
    set.at(999, () => fired.push('passed'));
    expect(fired).toEqual(['passed']);
    const first = set.at(1_010, () => fired.push('first'));
    set.at(1_020, () => fired.push('second'));
    // The loop ran late: both are overdue when the first is cancelled.
    fake.now = 1_030;
    first.cancel();
    expect(fired).toEqual(['passed']);
    fake.now = 1_031;
    vi.advanceTimersByTime(1);
    expect(fired).toEqual(['passed', 'second']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("a retrieval race and the call's deadline share the call's one timer", async () => {
    const set = new DeadlineSet(clock);
    const caller = new CallSignal();
    set.at(1_045, () => caller.abort(new DOMException('deadline exceeded', 'TimeoutError')));
    const race = new BranchRace(40, caller, clock, set);
    const cold = race.run('cold', 45, () => new Promise<never>(() => {}));
    const hot = race.run('hot', 15, () => new Promise<never>(() => {}));
    expect(vi.getTimerCount()).toBe(1);
    fake.now = 1_015;
    vi.advanceTimersByTime(15);
    expect((await hot).outcome).toMatchObject({ status: 'timeout', detail: 'hot_timeout' });
    fake.now = 1_040;
    vi.advanceTimersByTime(25);
    expect((await cold).outcome).toMatchObject({ status: 'timeout', detail: 'outer_deadline' });
    race.finish();
    expect(vi.getTimerCount()).toBe(1);
    expect(caller.aborted).toBe(false);
    fake.now = 1_045;
    vi.advanceTimersByTime(5);
    expect(caller.aborted).toBe(true);
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

describe('CallSignal', () => {
  it('aborts once, runs its listeners once in order, without the removed ones', () => {
    const signal = new CallSignal();
    const ran: string[] = [];
    const b = () => ran.push('b');
    signal.addEventListener('abort', () => ran.push('a'));
    signal.addEventListener('abort', b);
    signal.addEventListener('abort', () => ran.push('c'));
    signal.removeEventListener('abort', b);
    signal.abort('first');
    signal.abort('second');
    expect(ran).toEqual(['a', 'c']);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe('first');
    signal.addEventListener('abort', () => ran.push('late'));
    expect(ran).toEqual(['a', 'c']);
  });
});
