/**
 * One `ibex-context load` run in motion: sends calls for a scheduler, keeps
 * the calls in flight, ends those past their deadline, and drains them when the run stops. What happened
 * goes to the {@link LoadRecorder}; when calls go out is the scheduler's business (load-open-loop.ts,
 * load-closed-loop.ts).
 */
import { performance } from 'node:perf_hooks';
import type { LoadRecorder } from './load-recorder.js';
import type { DriverTransport } from './load-transport.js';
import type { LoadCall, StopReason } from './load-types.js';
import type { CallSink, RawCall, RawOutcome } from './raw-grpc.js';
import type { RequestSource } from './request-source.js';

/** Extra time, beyond the call deadline, that the drain waits for calls to end. */
const DRAIN_GRACE_MS = 250;
/** Period of the sweep that ends calls past their deadline on the driver's side, ms. */
const SWEEP_MS = 25;

/** What a run needs besides its transport and recorder. */
export interface RunSettings {
  source: RequestSource;
  /** The calls' deadline, ms (sent as grpc-timeout and enforced here too). */
  timeoutMs: number;
  /** Sees every call of the run as it ends, warmup included. */
  onCall?: (call: LoadCall) => void;
}

/** One call in flight: the sink its transport ends it through, so no closure is made per call. */
class Pending implements CallSink {
  call: RawCall | null = null;
  cancelledByUs = false;
  readonly expiresAt: number;

  constructor(
    private readonly run: LoadRun,
    readonly intendedAt: number,
    readonly sentAt: number,
    readonly measured: boolean,
    readonly then: (() => void) | undefined,
  ) {
    this.expiresAt = sentAt + run.settings.timeoutMs;
  }

  done(o: RawOutcome): void {
    this.run.ended(this, o);
  }
}

/** Sends, tracks and drains one run's calls. */
export class LoadRun {
  /** In send order; every call has the same timeout, so it is expiry order too. */
  private readonly inFlight = new Set<Pending>();
  private readonly sweeper: NodeJS.Timeout;
  private stoppedBy: StopReason | null = null;
  private onStop: ((reason: StopReason) => void) | undefined;
  private onIdle: (() => void) | undefined;
  /** Resolves with the reason once {@link LoadRun.stop} is called. */
  readonly whenStopped = new Promise<StopReason>((resolve) => {
    this.onStop = resolve;
  });

  constructor(
    private readonly transport: DriverTransport,
    readonly recorder: LoadRecorder,
    readonly settings: RunSettings,
  ) {
    // Ends calls past their deadline (a server that never answers); the server's own status usually wins.
    this.sweeper = setInterval(() => this.sweep(), SWEEP_MS);
  }

  /** True once the run stopped sending. */
  get stopped(): boolean {
    return this.stoppedBy !== null;
  }

  /** Calls sent and not yet ended. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /**
   * Sends the source's next request on connection `conn`. Latency counts from `intendedAt`; `then` runs
   * after the call ended, unless the run has stopped by then (closed loop: the next call).
   */
  send(conn: number, intendedAt: number, measured: boolean, then?: () => void): void {
    const sentAt = performance.now();
    const req = this.settings.source.next();
    this.recorder.sent(req, intendedAt, sentAt, measured);
    const p = new Pending(this, intendedAt, sentAt, measured, then);
    this.inFlight.add(p);
    // Measured answers keep their bodies: the recorder reads the packing counters from them.
    p.call = this.transport.call(conn, req, this.settings.timeoutMs, measured, p);
  }

  /** @internal The transport ended `p` with `o`. */
  ended(p: Pending, o: RawOutcome): void {
    const doneAt = performance.now();
    this.inFlight.delete(p);
    const rec = this.recorder;
    rec.answeredSinceProgress++;
    if (p.measured) {
      if (p.cancelledByUs) rec.unfinished();
      else rec.answered(o, p.intendedAt, p.sentAt, doneAt);
    }
    this.settings.onCall?.({ ...o, sentAt: p.sentAt, doneAt, measured: p.measured });
    if (p.then !== undefined && this.stoppedBy === null) p.then();
    if (this.stoppedBy !== null && this.inFlight.size === 0) this.onIdle?.();
  }

  private sweep(): void {
    const now = performance.now();
    for (const p of this.inFlight) {
      if (p.expiresAt > now) break;
      p.call?.expire();
    }
  }

  /** Stops sending (first reason wins); {@link LoadRun.whenStopped} resolves. */
  stop(reason: StopReason): void {
    if (this.stoppedBy !== null) return;
    this.stoppedBy = reason;
    this.onStop?.(reason);
  }

  /**
   * Waits for the calls in flight: the sweep ends each within its timeout (+ one sweep period); what is
   * left after the timeout + {@link DRAIN_GRACE_MS} is cancelled and counted as unfinished.
   */
  async drain(): Promise<void> {
    if (this.inFlight.size > 0) await this.idleOrAfter(this.settings.timeoutMs + DRAIN_GRACE_MS);
    for (const p of [...this.inFlight]) {
      p.cancelledByUs = true;
      p.call?.cancel();
    }
    clearInterval(this.sweeper);
  }

  /** Resolves when the last call in flight ends, or after `ms`, whichever comes first. */
  private idleOrAfter(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.onIdle = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}
