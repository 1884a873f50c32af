/**
 * The abort signal of one call without an EventTarget (one AbortController per call). Creating
 * an AbortController and adding and removing EventTarget listeners costs microseconds each, several times
 * per call; the pipeline's own stages (call context, retrieval race, CPU pool) need only a flag, a reason
 * and a listener list. Sources that hand a signal to a library (undici, Redis) get a real AbortSignal from
 * the retrieval's controller (src/retrieval/branch-race.ts).
 */

/**
 * What the pipeline reads of an abort signal: an AbortSignal has this shape, and so has the lighter
 * {@link CallSignal}.
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/**
 * A call's abort signal without an EventTarget: {@link AbortSignalLike} on a listener array. Aborts once;
 * listeners run in the order they were added, each at most once (they are removed when it aborts).
 */
export class CallSignal implements AbortSignalLike {
  aborted = false;
  reason: unknown = undefined;
  #listeners: (() => void)[] = [];

  addEventListener(_type: 'abort', listener: () => void): void {
    if (!this.aborted) this.#listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const i = this.#listeners.indexOf(listener);
    if (i >= 0) this.#listeners.splice(i, 1);
  }

  /** Aborts with `reason` and runs the listeners; a no-op once aborted. A throwing listener is reported. */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.#listeners;
    this.#listeners = [];
    for (const listener of listeners) {
      try {
        listener();
      } catch (err) {
        // As an EventTarget does: the other listeners still run, the error surfaces as uncaught.
        process.nextTick(() => {
          throw err;
        });
      }
    }
  }
}
