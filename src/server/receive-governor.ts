/**
 * Receive governor for large request messages (issue 9, SPEC §1 isolation rule): a token bucket per
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
