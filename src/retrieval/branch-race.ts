/**
 * The three branches of one call under one AbortController and one timer, armed at the earliest deadline.
 * A branch past its own timeout settles at once; synchronous answers settle without a promise or timer.
 */

import type { AbortSignalLike } from '../util/abort.js';
import {
  type ArmedTimer,
  afterPendingIo,
  armAt,
  type Clock,
  monotonicNow,
  type Scheduler,
} from '../util/clock.js';
import { stackless } from '../util/stackless.js';
import type { BranchName, BranchOutcome } from '../wire/types.js';
import { isBranchError } from './branch-error.js';

export interface Settled<T> {
  outcome: BranchOutcome;
  value: T | undefined;
}

const timeoutReason = (detail: string) => stackless(() => new DOMException(detail, 'TimeoutError'));

/** Our own reasons are `TimeoutError`s carrying the detail; anything else is a cancellation. */
function abortOutcome(name: BranchName, latency: number, reason: unknown): BranchOutcome {
  if (reason instanceof DOMException && reason.name === 'TimeoutError') {
    return { name, status: 'timeout', latency_ms: latency, detail: reason.message };
  }
  return { name, status: 'error', latency_ms: latency, detail: 'cancelled' };
}

function failureOutcome(name: BranchName, latency: number, err: unknown): BranchOutcome {
  if (isBranchError(err)) return { name, status: err.status, latency_ms: latency, detail: err.detail };
  // Only the class name: messages may quote data we must not echo.
  const kind = err instanceof Error ? err.name : typeof err;
  return { name, status: 'error', latency_ms: latency, detail: `unexpected ${kind}` };
}

function isThenable<T>(v: T | PromiseLike<T>): v is PromiseLike<T> {
  return typeof (v as { then?: unknown } | null)?.then === 'function';
}

interface Pending {
  readonly name: BranchName;
  readonly started: number;
  /** Absolute ms on the race's clock. */
  readonly at: number;
  readonly resolve: (s: Settled<never>) => void;
}

export class BranchRace {
  readonly #ctl = new AbortController();
  readonly #clock: Clock;
  readonly #caller: AbortSignalLike;
  readonly #scheduler: Scheduler;
  readonly #wallAt: number;
  readonly #pending: Pending[] = [];
  #timer: ArmedTimer | null = null;
  #armedAt = Number.POSITIVE_INFINITY;
  #abandoned = false;
  #finished = false;

  /** @param wallMs ≤ 0 or NaN ends the race at once; @param scheduler the call's timer, so it holds one. */
  constructor(wallMs: number, caller: AbortSignalLike, clock: Clock = monotonicNow, scheduler?: Scheduler) {
    this.#clock = clock;
    this.#caller = caller;
    this.#scheduler = scheduler ?? { at: (deadline, fn) => armAt(deadline, fn, { clock }) };
    this.#wallAt = wallMs > 0 ? clock() + wallMs : Number.NEGATIVE_INFINITY;
    if (caller.aborted) this.#onCaller();
    else {
      caller.addEventListener('abort', this.#onCaller, { once: true });
      if (!(wallMs > 0)) this.#endAll(timeoutReason('outer_deadline'));
    }
  }

  get signal(): AbortSignal {
    return this.#ctl.signal;
  }

  /** Runs one branch on the shared signal; synchronous when the source was. */
  run<T>(
    name: BranchName,
    ownMs: number,
    call: (signal: AbortSignal) => T | Promise<T>,
  ): Settled<T> | Promise<Settled<T>> {
    const signal = this.#ctl.signal;
    if (signal.aborted) return { outcome: abortOutcome(name, 0, signal.reason), value: undefined };
    const started = this.#clock();
    let answer: T | Promise<T>;
    try {
      answer = call(signal);
    } catch (err) {
      return { outcome: failureOutcome(name, this.#clock() - started, err), value: undefined };
    }
    if (!isThenable(answer)) {
      return {
        outcome: { name, status: 'success', latency_ms: this.#clock() - started, detail: '' },
        value: answer,
      };
    }
    return new Promise<Settled<T>>((resolve) => {
      const p: Pending = { name, started, at: started + ownMs, resolve: resolve as Pending['resolve'] };
      this.#pending.push(p);
      answer.then(
        (value) => {
          if (this.#take(p)) {
            const outcome: BranchOutcome = {
              name,
              status: 'success',
              latency_ms: this.#clock() - started,
              detail: '',
            };
            resolve({ outcome, value });
          }
        },
        (err: unknown) => {
          if (this.#take(p))
            resolve({ outcome: failureOutcome(name, this.#clock() - started, err), value: undefined });
        },
      );
      this.#schedule(Math.min(this.#wallAt, p.at));
    });
  }

  /** Stops the timer; aborts the shared signal if a branch was abandoned, so its read stops. Idempotent. */
  finish(): void {
    this.#finished = true;
    this.#timer?.cancel();
    this.#timer = null;
    this.#caller.removeEventListener('abort', this.#onCaller);
    if (this.#abandoned && !this.#ctl.signal.aborted) this.#ctl.abort(timeoutReason('branch_timeout'));
  }

  #take(p: Pending): boolean {
    const i = this.#pending.indexOf(p);
    if (i < 0) return false;
    this.#pending.splice(i, 1);
    return true;
  }

  #schedule(at: number): void {
    if (at >= this.#armedAt) return;
    this.#timer?.cancel();
    this.#armedAt = at;
    this.#timer = this.#scheduler.at(at, this.#onTimer);
  }

  // Decided after the next poll (afterPendingIo): a reply already waiting still settles `success`.
  readonly #onTimer = (): void => {
    this.#timer = null;
    this.#armedAt = Number.POSITIVE_INFINITY;
    afterPendingIo(this.#onDue);
  };

  readonly #onDue = (): void => {
    if (this.#finished) return;
    const now = this.#clock();
    if (now >= this.#wallAt) {
      this.#endAll(timeoutReason('outer_deadline'));
      return;
    }
    let next = this.#wallAt;
    for (const p of [...this.#pending]) {
      if (now >= p.at) {
        this.#take(p);
        this.#abandoned = true;
        p.resolve({
          outcome: abortOutcome(p.name, now - p.started, timeoutReason(`${p.name}_timeout`)),
          value: undefined,
        });
      } else if (p.at < next) next = p.at;
    }
    if (this.#pending.length > 0) this.#schedule(next);
  };

  readonly #onCaller = (): void => {
    const reason: unknown = this.#caller.reason;
    const deadline = reason instanceof DOMException && reason.name === 'TimeoutError';
    this.#endAll(
      deadline
        ? timeoutReason('outer_deadline')
        : stackless(() => new DOMException('cancelled', 'AbortError')),
    );
  };

  #endAll(reason: DOMException): void {
    if (!this.#ctl.signal.aborted) this.#ctl.abort(reason);
    this.#timer?.cancel();
    this.#timer = null;
    const now = this.#clock();
    for (const p of this.#pending.splice(0)) {
      p.resolve({ outcome: abortOutcome(p.name, now - p.started, reason), value: undefined });
    }
  }
}
