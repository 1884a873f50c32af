/** A call's abort signal without an EventTarget: the pipeline needs only a flag, a reason and listeners. */

/** What the pipeline reads of an abort signal: an AbortSignal, or the lighter {@link CallSignal}. */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** {@link AbortSignalLike} on a listener array: aborts once; listeners run once each, in order added. */
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

  /** Aborts with `reason` and runs the listeners; a no-op once aborted. */
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
