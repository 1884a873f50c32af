/**
 * The one monotonic clock and the one deadline timer of the service (undici's
 * `lib/util/timers.js` is the model). Every deadline — the request deadline D of contract.md §10, the CPU stage's
 * deadline, the packer's stop time — is an absolute ms value on {@link monotonicNow}, so it can cross a
 * thread boundary (`performance.timeOrigin` is shared by the process's threads up to sub-ms skew).
 */

/** A monotonic "now" in ms; tests inject a fake one. */
export type Clock = () => number;

/**
 * Monotonic "now" in ms on an epoch-like scale: `performance.timeOrigin + performance.now()`.
 * Never compare it with `Date.now()` (the wall clock can step).
 */
export function monotonicNow(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * Runs `fn` once the event loop has polled for I/O, i.e. in this iteration's check phase (`setImmediate`).
 * For the deadlines that give up on a dependency (the retrieval wall, a CPU task's result): Node runs
 * timers before the poll phase, so after a stalled loop turn (a GC pause, a long request) the deadline's
 * timer would fire before a reply that is already waiting in a worker's MessagePort or a socket, and the
 * call would be answered degraded although its answer had come in time. Deferring the decision by one
 * poll lets such replies settle first; a reply that has not arrived is not waited for.
 */
export function afterPendingIo(fn: () => void): void {
  setImmediate(fn);
}

/** Longest delay Node's timers accept (2^31 − 1 ms); a later deadline is reached in steps. */
const MAX_TIMER_MS = 2_147_483_647;

/** A timer armed by {@link armAt}. */
export interface ArmedTimer {
  /** Stops the timer; `fn` will not run. Idempotent. */
  cancel(): void;
}

/** Options of {@link armAt}. */
export interface ArmOptions {
  /** The clock `deadline` is on (default {@link monotonicNow}); tests inject a fake one. */
  clock?: Clock;
  /** Let the process exit while the timer is pending (default false). */
  unref?: boolean;
}

class DeadlineTimer implements ArmedTimer {
  #handle: NodeJS.Timeout | undefined;
  #done = false;

  readonly #deadline: number;
  readonly #fn: () => void;
  readonly #clock: Clock;
  readonly #unref: boolean;

  constructor(deadline: number, fn: () => void, clock: Clock, unref: boolean) {
    this.#deadline = deadline;
    this.#fn = fn;
    this.#clock = clock;
    this.#unref = unref;
    this.#check();
  }

  // libuv measures timers from the loop's cached time, so a timer can fire up to a ms before its delay
  // The clock, not the timer, decides; an early firing re-arms.
  readonly #check = (): void => {
    this.#handle = undefined;
    if (this.#done) return;
    const rest = this.#deadline - this.#clock();
    if (rest <= 0) {
      this.#done = true;
      this.#fn();
      return;
    }
    this.#handle = setTimeout(this.#check, Math.min(MAX_TIMER_MS, Math.ceil(rest)));
    if (this.#unref) this.#handle.unref();
  };

  cancel(): void {
    this.#done = true;
    if (this.#handle !== undefined) clearTimeout(this.#handle);
    this.#handle = undefined;
  }
}

/**
 * Runs `fn` once, no earlier than `deadline` on the clock (never early: an early timer firing re-arms
 * for what is left) and as soon after it as the event loop allows. A deadline already passed runs `fn`
 * synchronously, inside this call; `Infinity` never runs it and holds no timer.
 * @param deadline absolute ms on `opts.clock` (default {@link monotonicNow}).
 * @returns a handle whose `cancel()` stops the timer.
 */
export function armAt(deadline: number, fn: () => void, opts: ArmOptions = {}): ArmedTimer {
  if (deadline === Number.POSITIVE_INFINITY) return NEVER;
  return new DeadlineTimer(deadline, fn, opts.clock ?? monotonicNow, opts.unref ?? false);
}

const NEVER: ArmedTimer = { cancel() {} };

/** Where a call's deadlines are armed: {@link armAt}'s shape, so a {@link DeadlineSet} can stand in for it. */
export interface Scheduler {
  /** Runs `fn` once, no earlier than `deadline` (absolute ms on the scheduler's clock). */
  at(deadline: number, fn: () => void): ArmedTimer;
}

interface Pending extends ArmedTimer {
  readonly at: number;
  readonly fn: () => void;
}

/**
 * Every deadline of one call on ONE timer: the request deadline D, the retrieval wall and the
 * branches' own timeouts, the CPU task's withdrawal and deadline. A handful of entries, kept unsorted; a
 * single {@link armAt} timer is armed at the earliest and re-armed when that one fires or is cancelled, so a
 * call never holds more than one Node timer, and a cancelled deadline never wakes the loop.
 */
export class DeadlineSet implements Scheduler {
  readonly #clock: Clock;
  readonly #unref: boolean;
  readonly #entries: Pending[] = [];
  #timer: ArmedTimer | null = null;
  #armedAt = Number.POSITIVE_INFINITY;

  /**
   * @param clock the monotonic clock the deadlines are on (default {@link monotonicNow}).
   * @param unref let the process exit while a deadline is pending (default false).
   */
  constructor(clock: Clock = monotonicNow, unref = false) {
    this.#clock = clock;
    this.#unref = unref;
  }

  at(deadline: number, fn: () => void): ArmedTimer {
    const entry: Pending = { at: deadline, fn, cancel: () => this.#cancel(entry) };
    if (deadline === Number.POSITIVE_INFINITY) return entry;
    if (deadline <= this.#clock()) {
      fn();
      return NEVER;
    }
    this.#entries.push(entry);
    if (deadline < this.#armedAt) this.#arm(deadline);
    return entry;
  }

  /** Deadlines still pending (tests). */
  get size(): number {
    return this.#entries.length;
  }

  #cancel(entry: Pending): void {
    const i = this.#entries.indexOf(entry);
    if (i < 0) return;
    this.#entries.splice(i, 1);
    if (entry.at <= this.#armedAt) this.#arm(this.#earliest());
  }

  #earliest(): number {
    let min = Number.POSITIVE_INFINITY;
    for (const e of this.#entries) if (e.at < min) min = e.at;
    return min;
  }

  #arm(at: number): void {
    if (at === this.#armedAt && this.#timer !== null) return;
    this.#timer?.cancel();
    this.#armedAt = at;
    if (at === Number.POSITIVE_INFINITY) {
      this.#timer = null;
      return;
    }
    // An entry already due (a late loop) runs from the timer, never inside the at() or cancel() that re-arms.
    this.#timer = armAt(Math.max(at, this.#clock() + 1e-3), this.#fire, {
      clock: this.#clock,
      unref: this.#unref,
    });
  }

  readonly #fire = (): void => {
    this.#timer = null;
    this.#armedAt = Number.POSITIVE_INFINITY;
    const now = this.#clock();
    const due = this.#entries.filter((e) => e.at <= now).sort((a, b) => a.at - b.at);
    for (const e of due) this.#entries.splice(this.#entries.indexOf(e), 1);
    // Re-armed before running them: an entry may add or cancel others.
    this.#arm(this.#earliest());
    for (const e of due) e.fn();
  };
}
