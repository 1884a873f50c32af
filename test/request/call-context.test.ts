import { EventEmitter } from 'node:events';
import { Metadata } from '@grpc/grpc-js';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  abortCause,
  type CallLike,
  createCallContext,
  monotonicNow,
} from '../../src/request/call-context.js';

class FakeCall extends EventEmitter implements CallLike {
  readonly metadata = new Metadata();
  cancelled = false;
  constructor(private readonly deadline: Date | number = Number.POSITIVE_INFINITY) {
    super();
  }
  getDeadline() {
    return this.deadline;
  }
}

afterEach(() => {
  vi.useRealTimers();
});

describe('createCallContext', () => {
  it('uses arrival + timeout when the caller set no deadline', () => {
    const arrival = monotonicNow();
    const { ctx, dispose } = createCallContext(new FakeCall(), { timeoutMs: 45, arrival });
    expect(ctx.arrival).toBe(arrival);
    expect(ctx.deadline).toBe(arrival + 45);
    expect(ctx.signal.aborted).toBe(false);
    dispose();
  });

  it("takes the caller's deadline when it is sooner", () => {
    const arrival = monotonicNow();
    const { ctx, dispose } = createCallContext(new FakeCall(Date.now() + 10), { timeoutMs: 10_000, arrival });
    expect(ctx.deadline).toBeGreaterThan(arrival);
    expect(ctx.deadline).toBeLessThanOrEqual(arrival + 12);
    dispose();
  });

  it('is aborted at once when the deadline has already passed', () => {
    const { ctx } = createCallContext(new FakeCall(new Date(Date.now() - 5)), { timeoutMs: 10_000 });
    expect(ctx.signal.aborted).toBe(true);
    expect(abortCause(ctx.signal)).toBe('deadline');
    expect((ctx.signal.reason as DOMException).name).toBe('TimeoutError');
  });

  it('aborts with the deadline reason when the deadline passes (injected clock, fake timers)', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    let now = 1_000;
    const { ctx } = createCallContext(new FakeCall(), { timeoutMs: 20, clock: () => now });
    expect(ctx.deadline).toBe(1_020);
    now = 1_020;
    vi.advanceTimersByTime(20);
    expect(abortCause(ctx.signal)).toBe('deadline');
  });

  it('deadline timer that fires early re-checks the clock and re-arms instead of aborting before D', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    let now = 1_000;
    const { ctx, dispose } = createCallContext(new FakeCall(), { timeoutMs: 20, clock: () => now });
    // The timer fires at its 20 ms, but the monotonic clock says 0.66 ms remain (libuv's stale loop time).
    now = 1_019.34;
    vi.advanceTimersByTime(20);
    expect(ctx.signal.aborted).toBe(false);
    now = 1_020;
    vi.advanceTimersByTime(1);
    expect(abortCause(ctx.signal)).toBe('deadline');
    dispose();
  });

  it('aborts with AbortError when the caller cancels', () => {
    const call = new FakeCall();
    const { ctx, dispose } = createCallContext(call, { timeoutMs: 10_000 });
    call.emit('cancelled');
    expect(abortCause(ctx.signal)).toBe('cancelled');
    expect((ctx.signal.reason as DOMException).name).toBe('AbortError');
    dispose();
  });

  it("reports grpc-js ending the call at the caller's deadline as a deadline, not a cancel", () => {
    const call = new FakeCall(Date.now() + 10);
    const { ctx, dispose } = createCallContext(call, { timeoutMs: 10_000 });
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 10 });
    call.emit('cancelled');
    expect(abortCause(ctx.signal)).toBe('deadline');
    dispose();
  });

  it('is aborted at once on a call already cancelled', () => {
    const call = new FakeCall();
    call.cancelled = true;
    expect(abortCause(createCallContext(call, { timeoutMs: 10_000 }).ctx.signal)).toBe('cancelled');
  });

  it('after dispose, neither the timer nor a later `cancelled` aborts the signal', async () => {
    const call = new FakeCall();
    const { ctx, dispose } = createCallContext(call, { timeoutMs: 5 });
    dispose();
    dispose();
    call.emit('cancelled');
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(ctx.signal.aborted).toBe(false);
    expect(call.listenerCount('cancelled')).toBe(0);
  });

  it('dispose drops the reads the call gathered, so a finished call holds none of its hits', () => {
    const { ctx, dispose } = createCallContext(new FakeCall(), { timeoutMs: 10_000 });
    const retrieval = {
      directive: null,
      hot: [],
      cold: [],
      branches: [],
      dropped: { invalid: 0, foreign: 0 },
      bounded: { oversize: 0, ignored: 0 },
    };
    ctx.gathered.retrieval = retrieval;
    ctx.gathered.directive = {
      directive: null,
      outcome: { name: 'directive', status: 'success', latency_ms: 1, detail: '' },
    };
    expect(ctx.gathered.retrieval).toBe(retrieval);
    dispose();
    expect(ctx.gathered.retrieval).toBeUndefined();
    expect(ctx.gathered.directive).toBeUndefined();
  });
});
