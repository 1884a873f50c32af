// Turns between one HTTP/2 connection's large request messages (contract.md §1 isolation): reading is
// event-loop work, and HTTP/2 sharing a connection among multi-MB uploads lets none finish in time.
import { monotonicNow } from '../util/clock.js';

/** One call reading a large request message, as {@link UploadTurns} sees it. */
export interface UploadCall {
  /** Bytes of its message still to arrive. */
  readonly remaining: number;
  /** Whether its stream is gone (answered, cancelled or reset): it will read nothing more. */
  readonly gone: boolean;
  pause(): void;
  resume(): void;
}

interface Turns<C> {
  active: C | null;
  /** When the active call's next bytes are due by, ms (monotonic): its last bytes plus the stall time. */
  dueAt: number;
  waiting: Set<C>;
  watchdog: ReturnType<typeof setTimeout> | null;
}

/** Default of {@link UploadTurns}' stall time, ms. */
export const UPLOAD_STALL_MS = 250;

/**
 * One call at a time reads its large message, the others wait paused; next goes the one with the fewest
 * bytes left. An active call `stallMs` late while others wait goes to the back. Small messages never wait.
 */
export class UploadTurns<C extends UploadCall> {
  readonly #byConnection = new WeakMap<object, Turns<C>>();
  readonly #stallMs: number;
  readonly #now: () => number;

  /** `stallMs`: how long an active call may send nothing while others wait; `now`: a monotonic ms clock. */
  constructor(stallMs = UPLOAD_STALL_MS, now: () => number = monotonicNow) {
    this.#stallMs = stallMs;
    this.#now = now;
  }

  /** Bytes of `call`'s message arrived: true when it is its turn, false when it was paused to wait. */
  arrived(connection: object, call: C): boolean {
    let t = this.#byConnection.get(connection);
    if (t === undefined) {
      t = { active: null, dueAt: 0, waiting: new Set(), watchdog: null };
      this.#byConnection.set(connection, t);
    }
    if (t.active === call || t.active === null || t.active.gone) {
      t.active = call;
      t.waiting.delete(call);
      t.dueAt = this.#now() + this.#stallMs;
      return true;
    }
    call.pause();
    t.waiting.add(call);
    this.#watch(t);
    return false;
  }

  /** `call`'s message is complete, or its stream is gone: it leaves, and the turn passes on if it had it. */
  done(connection: object, call: C): void {
    const t = this.#byConnection.get(connection);
    if (t === undefined) return;
    t.waiting.delete(call);
    if (t.active !== call) return;
    t.active = null;
    this.#next(t, null);
  }

  /** Calls waiting for a turn on `connection` (tests, metrics). */
  waiting(connection: object): number {
    return this.#byConnection.get(connection)?.waiting.size ?? 0;
  }

  /** Gives the turn to the waiting call with the fewest bytes left (`skip` only if no other waits). */
  #next(t: Turns<C>, skip: C | null): void {
    let best: C | null = null;
    for (const c of t.waiting) {
      if (c.gone) t.waiting.delete(c);
      else if (c !== skip && (best === null || c.remaining < best.remaining)) best = c;
    }
    best ??= skip !== null && t.waiting.has(skip) ? skip : null;
    if (best === null) return;
    t.waiting.delete(best);
    t.active = best;
    t.dueAt = this.#now() + this.#stallMs;
    best.resume();
  }

  /** While calls wait, checks that the active one's bytes keep coming; a stalled one goes to the back. */
  #watch(t: Turns<C>): void {
    if (t.watchdog !== null) return;
    const check = () => {
      t.watchdog = null;
      if (t.waiting.size === 0) return;
      const active = t.active;
      if (active === null || active.gone) {
        t.active = null;
        this.#next(t, null);
      } else if (this.#now() >= t.dueAt) {
        active.pause();
        t.waiting.add(active);
        t.active = null;
        this.#next(t, active);
      }
      if (t.waiting.size > 0) arm();
    };
    const arm = () => {
      t.watchdog = setTimeout(check, Math.max(1, Math.ceil(t.dueAt - this.#now())));
      t.watchdog.unref?.();
    };
    arm();
  }
}
