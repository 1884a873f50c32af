/**
 * The one monotonic clock and the one deadline timer of the service (issue 14 item 1; undici's
 * `lib/util/timers.js` is the model). Every deadline — the request deadline D of SPEC §10, the CPU stage's
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
  // (issue 9 item 4, issue 11 item 3): the clock, not the timer, decides; an early firing re-arms.
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
