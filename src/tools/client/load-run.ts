// One `ibex-context load` run in motion: sends calls for a scheduler, ends those past their deadline and
// drains the rest at the stop. Recording is the LoadRecorder's; timing the scheduler's.
import { performance } from 'node:perf_hooks';
import type { LoadRecorder } from './load-recorder.js';
import type { DriverTransport } from './load-transport.js';
import type { LoadCall, StopReason } from './load-types.js';
import type { CallSink, RawCall, RawOutcome } from './raw-grpc.js';
import type { RequestSource } from './request-source.js';

const DRAIN_GRACE_MS = 250;
const SWEEP_MS = 25;

export interface RunSettings {
  source: RequestSource;
  /** The calls' deadline, ms (sent as grpc-timeout and enforced here too). */
  timeoutMs: number;
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

export class LoadRun {
  /** Same timeout for every call, so send order is expiry order. */
  private readonly inFlight = new Set<Pending>();
  private readonly sweeper: NodeJS.Timeout;
  private stoppedBy: StopReason | null = null;
  private onStop: ((reason: StopReason) => void) | undefined;
  private onIdle: (() => void) | undefined;
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

  get stopped(): boolean {
    return this.stoppedBy !== null;
  }

  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** Sends the next request on `conn`; latency from `intendedAt`; `then` runs after, unless stopped. */
  send(conn: number, intendedAt: number, measured: boolean, then?: () => void): void {
    const sentAt = performance.now();
    const req = this.settings.source.next();
    this.recorder.sent(req, intendedAt, sentAt, measured);
    const p = new Pending(this, intendedAt, sentAt, measured, then);
    this.inFlight.add(p);
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

  /** Stops sending (first reason wins). */
  stop(reason: StopReason): void {
    if (this.stoppedBy !== null) return;
    this.stoppedBy = reason;
    this.onStop?.(reason);
  }

  /** Waits for calls in flight; any left after timeout + {@link DRAIN_GRACE_MS} are cancelled. */
  async drain(): Promise<void> {
    if (this.inFlight.size > 0) await this.idleOrAfter(this.settings.timeoutMs + DRAIN_GRACE_MS);
    for (const p of [...this.inFlight]) {
      p.cancelledByUs = true;
      p.call?.cancel();
    }
    clearInterval(this.sweeper);
  }

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
