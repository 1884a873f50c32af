/** The service's monotonic clock and deadline timers; deadlines are absolute ms, valid across threads. */

export type Clock = () => number;

/** Monotonic ms on an epoch-like scale (`timeOrigin + now()`); never compare with `Date.now()`. */
export function monotonicNow(): number {
  return performance.timeOrigin + performance.now();
}

/** Runs `fn` after this loop turn's I/O poll: replies already waiting settle before a deadline gives up. */
export function afterPendingIo(fn: () => void): void {
  setImmediate(fn);
}

/** Longest delay Node's timers accept (2^31 − 1 ms); a later deadline is reached in steps. */
const MAX_TIMER_MS = 2_147_483_647;

export interface ArmedTimer {
  cancel(): void;
}

export interface ArmOptions {
  clock?: Clock;
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

  // libuv timers count from the loop's cached time and may fire early: the clock decides, and re-arms.
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

/** Runs `fn` once, never before `deadline` (absolute ms on `opts.clock`); a passed one runs it at once. */
export function armAt(deadline: number, fn: () => void, opts: ArmOptions = {}): ArmedTimer {
  if (deadline === Number.POSITIVE_INFINITY) return NEVER;
  return new DeadlineTimer(deadline, fn, opts.clock ?? monotonicNow, opts.unref ?? false);
}

const NEVER: ArmedTimer = { cancel() {} };

/** Where a call's deadlines are armed: {@link armAt}'s shape, so a {@link DeadlineSet} can stand in. */
export interface Scheduler {
  at(deadline: number, fn: () => void): ArmedTimer;
}

interface Pending extends ArmedTimer {
  readonly at: number;
  readonly fn: () => void;
}

/** Every deadline of one call on one Node timer, armed at the earliest; a cancelled one never wakes it. */
export class DeadlineSet implements Scheduler {
  readonly #clock: Clock;
  readonly #unref: boolean;
  readonly #entries: Pending[] = [];
  #timer: ArmedTimer | null = null;
  #armedAt = Number.POSITIVE_INFINITY;

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
