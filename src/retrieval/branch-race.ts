/**
 * The three retrieval branches of one call under ONE AbortController and ONE timer (a call used
 * to build a controller and a timer for the wall and one of each per branch).
 *
 * Why one: the wall and the branches' own timeouts are just deadlines on the same clock, so a single timer
 * armed at the earliest pending one serves them all ({@link armAt} re-arms for the next). A branch past its
 * own timeout is settled `timeout`/`<name>_timeout` at once; its read is abandoned, and stopped through the
 * shared signal when the retrieval ends ({@link BranchRace.finish}) or the wall passes — never later than
 * before, since the retrieval ends as soon as every branch has settled. A source that answers
 * synchronously (the embedded store's cached hot and directive reads) is settled without a promise or a
 * timer; a retrieval whose branches all answer synchronously arms no timer at all.
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

/** A branch's outcome and, on success, its value. */
export interface Settled<T> {
  outcome: BranchOutcome;
  value: T | undefined;
}

// Raised per branch that times out: without a stack (util/stackless.ts).
const timeoutReason = (detail: string) => stackless(() => new DOMException(detail, 'TimeoutError'));

/**
 * Reads an abort reason into an outcome. Our own reasons are DOMException `TimeoutError`s whose message is
 * the detail (`outer_deadline`, …); anything else that aborted is a cancellation.
 */
function abortOutcome(name: BranchName, latency: number, reason: unknown): BranchOutcome {
  if (reason instanceof DOMException && reason.name === 'TimeoutError') {
    return { name, status: 'timeout', latency_ms: latency, detail: reason.message };
  }
  return { name, status: 'error', latency_ms: latency, detail: 'cancelled' };
}

function failureOutcome(name: BranchName, latency: number, err: unknown): BranchOutcome {
  if (isBranchError(err)) return { name, status: err.status, latency_ms: latency, detail: err.detail };
  // Unknown failures keep only the error's class name: messages may quote data we must not echo.
  const kind = err instanceof Error ? err.name : typeof err;
  return { name, status: 'error', latency_ms: latency, detail: `unexpected ${kind}` };
}

function isThenable<T>(v: T | PromiseLike<T>): v is PromiseLike<T> {
  return typeof (v as { then?: unknown } | null)?.then === 'function';
}

/** A branch still waiting for its source. */
interface Pending {
  readonly name: BranchName;
  readonly started: number;
  /** Its own timeout, absolute ms on the race's clock. */
  readonly at: number;
  readonly resolve: (s: Settled<never>) => void;
}

/** One retrieval's branches under one signal and one timer; see the module comment. */
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

  /**
   * @param wallMs the wall W in ms from now; ≤ 0 (or NaN) ends it at once (`outer_deadline`).
   * @param caller the request's signal: its abort ends every branch (`outer_deadline` for a TimeoutError
   *   reason, else `error`/`cancelled`).
   * @param clock the monotonic clock (tests inject a fake one with fake timers).
   * @param scheduler where the race's one deadline is armed: the call's timer when given (so that a call
   *   holds one timer in all), else {@link armAt} on `clock`.
   */
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

  /** The signal every source gets: aborts at the wall, on the caller's abort, or at {@link finish}. */
  get signal(): AbortSignal {
    return this.#ctl.signal;
  }

  /**
   * Runs one branch: `call` gets the shared signal; its answer (a value, or a promise of one) becomes
   * `success`, a throw or rejection `error`/`unavailable`/… (BranchError status), its own timeout
   * `timeout`/`<name>_timeout`, the wall `timeout`/`outer_deadline`. Latencies in ms.
   * @param ownMs the branch's own timeout, ms from now.
   * @returns the settled branch, synchronously when the source answered synchronously.
   */
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

  /**
   * Ends the race once every branch has settled: stops the timer, detaches from the caller's signal and,
   * if a branch was abandoned on its own timeout, aborts the shared signal so its read stops. Idempotent.
   */
  finish(): void {
    this.#finished = true;
    this.#timer?.cancel();
    this.#timer = null;
    this.#caller.removeEventListener('abort', this.#onCaller);
    if (this.#abandoned && !this.#ctl.signal.aborted) this.#ctl.abort(timeoutReason('branch_timeout'));
  }

  /** Removes `p` from the pending list; false if it had already settled. */
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

  // A deadline is decided after the loop's next poll (afterPendingIo): a store reply already waiting when a
  // late timer fires still settles its branch `success`.
  readonly #onTimer = (): void => {
    this.#timer = null;
    this.#armedAt = Number.POSITIVE_INFINITY;
    afterPendingIo(this.#onDue);
  };

  // Runs whether or not a timer was armed meanwhile: a branch started in between (its deadline already past,
  // so its timer ran at once) is settled here; a later deadline is re-armed as usual.
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

  /** Aborts the shared signal and settles every pending branch with `reason`. */
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
