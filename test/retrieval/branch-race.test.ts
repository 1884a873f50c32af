/**
 * One AbortController and one timer per retrieval, on fake timers and an injected clock: the
 * wall and the branches' own timeouts share one timer; a synchronous source arms none; a branch past its
 * own timeout is settled `<name>_timeout` and its read stopped when the retrieval ends; the wall and the
 * caller's abort settle what is left.
 */
import { MessageChannel } from 'node:worker_threads';
import { describe, expect, it, vi } from 'vitest';
import { BranchRace } from '../../src/retrieval/branch-race.js';
import { useFakeClock } from '../helpers/fake-clock.js';

/** A source read that never answers by itself; records the signal it was given. */
function hanging() {
  const seen: AbortSignal[] = [];
  const read = (s: AbortSignal) => {
    seen.push(s);
    return new Promise<string>(() => {});
  };
  return { seen, read };
}

describe('BranchRace', () => {
  const fake = useFakeClock(10_000);
  const { clock } = fake;
  const advance = (ms: number) => fake.advance(ms);

  it('a source that answers synchronously is settled at once and arms no timer', () => {
    const race = new BranchRace(40, new AbortController().signal, clock);
    const d = race.run('directive', 5, () => 'directive text');
    expect(d).toEqual({
      outcome: { name: 'directive', status: 'success', latency_ms: 0, detail: '' },
      value: 'directive text',
    });
    expect(vi.getTimerCount()).toBe(0);
    race.finish();
    expect(race.signal.aborted).toBe(false);
  });

  it('three pending branches share one timer; own timeouts settle each one at its time, the wall the rest', async () => {
    const race = new BranchRace(40, new AbortController().signal, clock);
    const src = hanging();
    const d = race.run('directive', 5, src.read) as Promise<unknown>;
    const h = race.run('hot', 15, src.read) as Promise<unknown>;
    const c = race.run('cold', 45, src.read) as Promise<unknown>;
    expect(vi.getTimerCount()).toBe(1);
    expect(new Set(src.seen)).toEqual(new Set([race.signal]));
    advance(5);
    await expect(d).resolves.toEqual({
      outcome: { name: 'directive', status: 'timeout', latency_ms: 5, detail: 'directive_timeout' },
      value: undefined,
    });
    // The directive's read is abandoned, not aborted: the shared signal still serves hot and cold.
    expect(race.signal.aborted).toBe(false);
    expect(vi.getTimerCount()).toBe(1);
    advance(10);
    await expect(h).resolves.toMatchObject({
      outcome: { status: 'timeout', latency_ms: 15, detail: 'hot_timeout' },
    });
    advance(25);
    await expect(c).resolves.toMatchObject({
      outcome: { status: 'timeout', latency_ms: 40, detail: 'outer_deadline' },
    });
    expect(race.signal.aborted).toBe(true);
    race.finish();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a branch abandoned on its own timeout has its read stopped when the retrieval finishes', async () => {
    const race = new BranchRace(40, new AbortController().signal, clock);
    const d = race.run('directive', 5, () => new Promise<string>(() => {})) as Promise<unknown>;
    const h = race.run('hot', 15, () => Promise.resolve(['hit']));
    await expect(h).resolves.toMatchObject({ outcome: { status: 'success' }, value: ['hit'] });
    advance(5);
    await expect(d).resolves.toMatchObject({ outcome: { detail: 'directive_timeout' } });
    expect(race.signal.aborted).toBe(false);
    race.finish();
    expect(race.signal.aborted).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('never settles a branch before its own timeout on the clock, even if the timer fires early', async () => {
    const race = new BranchRace(40, new AbortController().signal, clock);
    let settled = false;
    void (race.run('directive', 5, () => new Promise<string>(() => {})) as Promise<unknown>).then(() => {
      settled = true;
    });
    // The timer fires after 5 ms of timer time while the clock says 4.5: re-armed, not settled.
    fake.now += 4.5;
    await vi.advanceTimersByTimeAsync(5);
    expect(settled).toBe(false);
    expect(vi.getTimerCount()).toBe(1);
    fake.now += 0.5;
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe(true);
    race.finish();
  });

  it("a branch started between the wall's timer and its decision is settled by that decision", async () => {
    const race = new BranchRace(40, new AbortController().signal, clock);
    const h = race.run('hot', 45, () => new Promise<string>(() => {})) as Promise<unknown>;
    // The wall's timer fires; its decision waits for the loop's poll (afterPendingIo).
    advance(40);
    const c = race.run('cold', 45, () => new Promise<string>(() => {})) as Promise<unknown>;
    await expect(h).resolves.toMatchObject({ outcome: { status: 'timeout', detail: 'outer_deadline' } });
    await expect(c).resolves.toMatchObject({ outcome: { status: 'timeout', detail: 'outer_deadline' } });
    expect(race.signal.aborted).toBe(true);
    race.finish();
  });

  it("the caller's abort ends every branch: outer_deadline for its deadline, cancelled otherwise", async () => {
    for (const [reason, expected] of [
      [
        new DOMException('deadline exceeded', 'TimeoutError'),
        { status: 'timeout', detail: 'outer_deadline' },
      ],
      [new DOMException('call cancelled', 'AbortError'), { status: 'error', detail: 'cancelled' }],
    ] as const) {
      const caller = new AbortController();
      const race = new BranchRace(40, caller.signal, clock);
      const h = race.run('hot', 15, () => new Promise<string>(() => {})) as Promise<unknown>;
      caller.abort(reason);
      await expect(h).resolves.toMatchObject({ outcome: expected });
      expect(race.signal.aborted).toBe(true);
      // A branch started after the abort is not called.
      let called = false;
      expect(
        race.run('cold', 45, () => {
          called = true;
          return 'x';
        }),
      ).toMatchObject({ outcome: expected });
      expect(called).toBe(false);
      race.finish();
    }
  });

  it('a zero wall ends the race before any branch runs; a synchronous throw is the branch failure', () => {
    const race = new BranchRace(0, new AbortController().signal, clock);
    expect(race.run('hot', 15, () => 'never')).toMatchObject({
      outcome: { status: 'timeout', detail: 'outer_deadline' },
    });
    const open = new BranchRace(40, new AbortController().signal, clock);
    expect(
      open.run('directive', 5, () => {
        throw new TypeError('secret detail');
      }),
    ).toMatchObject({ outcome: { status: 'error', detail: 'unexpected TypeError' } });
    open.finish();
  });
});

/** Blocks this thread for `ms` of real time, as a GC pause or a long turn of another call would. */
function stallLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy: the loop can neither fire timers nor read ports
  }
}

describe('BranchRace on the real event loop', () => {
  it('a reply already waiting when a stalled loop reaches the wall settles its branch success', async () => {
    const { port1, port2 } = new MessageChannel();
    try {
      const race = new BranchRace(5, new AbortController().signal);
      const reply = new Promise<string>((resolve) => port1.once('message', resolve));
      const cold = race.run('cold', 45, () => reply);
      // Posted in time, like a store-read thread's answer; the loop stalls past the wall before reading it.
      // Node runs due timers before it polls ports: deciding at the timer would say outer_deadline.
      port2.postMessage('hits');
      stallLoop(25);
      await expect(cold).resolves.toMatchObject({
        outcome: { name: 'cold', status: 'success' },
        value: 'hits',
      });
      // Nothing was abandoned: finishing the race leaves the shared signal alone.
      race.finish();
      expect(race.signal.aborted).toBe(false);
    } finally {
      port1.close();
    }
  });

  it('a reply that has not arrived when the wall passes is not waited for', async () => {
    const race = new BranchRace(5, new AbortController().signal);
    const cold = race.run('cold', 45, () => new Promise<string>(() => {}));
    stallLoop(25);
    await expect(cold).resolves.toMatchObject({
      outcome: { name: 'cold', status: 'timeout', detail: 'outer_deadline' },
    });
    expect(race.signal.aborted).toBe(true);
    race.finish();
  });
});
