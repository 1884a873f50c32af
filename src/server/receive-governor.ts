/**
 * Receive governor for large request messages (contract.md §1 isolation rule): a token bucket per
 * HTTP/2 connection over the bytes of messages of 1 MiB or more. Reading bytes is main-thread work that
 * no pool can take over (Node's HTTP/2 layer and grpc-js's decoder run on the event loop), so a caller
 * that streams multi-MB requests as fast as loopback carries them (~180 MB/s in `bench:isolation`) takes
 * the event loop from every other caller. Past its budget a connection's stream is paused: HTTP/2 flow
 * control then holds the sender's bytes on the sender's side, and only that connection's large calls wait.
 * Small messages — a proxy's ordinary chat traffic — are never counted nor paused.
 *
 * The burst is the largest request the transport accepts, so one maximal request from an idle connection
 * goes through at full speed; only a sustained stream of them is held to the rate.
 */
import { monotonicNow } from '../util/clock.js';

/** The bucket's shape. */
export interface ReceiveBudget {
  /** Sustained rate per connection, bytes per second; 0 turns the governor off. */
  bytesPerSecond: number;
  /** Bucket size, bytes: what an idle connection may send at once. */
  burstBytes: number;
}

interface Bucket {
  /** Bytes that may still arrive without a pause; negative = owed. */
  tokens: number;
  /** When `tokens` was last refilled, ms on the monotonic clock. */
  at: number;
}

/** Token buckets by connection (weakly held: a closed session takes its bucket with it). */
export class ReceiveGovernor {
  readonly #buckets = new WeakMap<object, Bucket>();
  readonly #budget: ReceiveBudget;
  readonly #now: () => number;
  #pauses = 0;

  /** @param now monotonic ms clock (tests inject one). */
  constructor(budget: ReceiveBudget, now: () => number = monotonicNow) {
    this.#budget = budget;
    this.#now = now;
  }

  /** Whether the governor counts anything (`bytesPerSecond` > 0). */
  get enabled(): boolean {
    return this.#budget.bytesPerSecond > 0;
  }

  /**
   * Takes `bytes` of a large message from `connection`'s bucket.
   * @returns how long the stream should pause, ms (until the bucket is back at zero); 0 within budget.
   */
  take(connection: object, bytes: number): number {
    const { bytesPerSecond, burstBytes } = this.#budget;
    if (bytesPerSecond <= 0) return 0;
    const now = this.#now();
    let b = this.#buckets.get(connection);
    if (b === undefined) {
      b = { tokens: burstBytes, at: now };
      this.#buckets.set(connection, b);
    }
    b.tokens = Math.min(burstBytes, b.tokens + ((now - b.at) * bytesPerSecond) / 1000);
    b.at = now;
    b.tokens -= bytes;
    if (b.tokens >= 0) return 0;
    this.#pauses++;
    return (-b.tokens * 1000) / bytesPerSecond;
  }

  /** Pauses asked for so far (metrics: how often the governor held a connection back). */
  get pauses(): number {
    return this.#pauses;
  }
}

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
  /** When the active call's next bytes are due by, ms (monotonic): its last bytes, or the end of its rate pause. */
  dueAt: number;
  waiting: Set<C>;
  watchdog: ReturnType<typeof setTimeout> | null;
}

/** Default of {@link UploadTurns}' stall time, ms. */
export const UPLOAD_STALL_MS = 250;

/**
 * Large uploads of one connection take turns: one call at a time reads its large message, the
 * others wait paused (HTTP/2 flow control holds their bytes on the sender's side, one stream window each),
 * and when it is done the waiting call with the fewest bytes left goes next (shortest remaining first).
 * Sharing a connection's receive rate among every upload in flight, as HTTP/2 does by itself, finishes
 * none of them when more arrive than the rate carries: in `bench:isolation` a noisy org's 3.9 MB and 9.8 MB
 * uploads at 10 req/s each (≈ 137 MB/s against a 32 MB/s governor) all missed their 2 s deadline. In turns,
 * what the rate carries completes. A turn is never held by a stalled sender: an active call whose next bytes
 * are `stallMs` late while others wait goes to the back. Small messages never take part.
 */
export class UploadTurns<C extends UploadCall> {
  readonly #byConnection = new WeakMap<object, Turns<C>>();
  readonly #stallMs: number;
  readonly #now: () => number;

  /**
   * @param stallMs how long an active call may send nothing while others wait, ms.
   * @param now monotonic ms clock (tests inject one, with fake timers).
   */
  constructor(stallMs = UPLOAD_STALL_MS, now: () => number = monotonicNow) {
    this.#stallMs = stallMs;
    this.#now = now;
  }

  /**
   * Bytes of `call`'s large message arrived.
   * @returns true when it is the call's turn (read on); false when another call has the turn — the call
   *   was paused and waits.
   */
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

  /** The active call of `connection` is paused for `ms` by the rate: its bytes are not late meanwhile. */
  held(connection: object, call: C, ms: number): void {
    const t = this.#byConnection.get(connection);
    if (t?.active === call) t.dueAt = this.#now() + ms + this.#stallMs;
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
