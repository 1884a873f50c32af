/**
 * Turns a grpc-js call's deadline and cancellation into one abort signal that flows from the handler
 * down to retrieval and the pool (the nice-grpc pattern), plus the absolute request deadline D of
 * contract.md §10 on the monotonic clock, and the call's one timer ({@link DeadlineSet}) that every stage arms
 * its deadlines on.
 *
 * One AbortController and one timer per call. The call's signal is a {@link CallSignal}, a
 * plain listener list rather than an EventTarget: only the retrieval branches need a real AbortSignal
 * (sockets, Redis commands), and they get the retrieval's own controller (branch-race.ts).
 */
import type { Metadata } from '@grpc/grpc-js';
import type { CallTrace } from '../telemetry/tracing/call-trace.js';
import { type AbortSignalLike, CallSignal } from '../util/abort.js';
import { type ArmedTimer, type Clock, DeadlineSet, monotonicNow } from '../util/clock.js';
import { stackless } from '../util/stackless.js';
import { Errors } from '../wire/errors.js';

export type { AbortSignalLike };
/** Re-exported for the server modules that read D; the clock itself lives in src/util/clock.ts. */
export { monotonicNow };

/** Per-call context handed to the pipeline. */
export interface CallContext {
  /**
   * Aborts when the request deadline passes (reason: DOMException `TimeoutError`) or the caller
   * cancels (reason: DOMException `AbortError`). Pass it to every async step (retrieval, pool).
   */
  readonly signal: AbortSignalLike;
  /**
   * The call's one timer: arm every deadline of the call on it (retrieval wall, CPU stage). Absent in
   * contexts built by hand (tests, warm-up): stages then arm their own.
   */
  readonly timer?: DeadlineSet;
  /**
   * Absolute request deadline D in ms on the {@link monotonicNow} clock:
   * min(arrival + IBEX_CONTEXT_TIMEOUT, caller's gRPC deadline). The response must be ready before it.
   */
  readonly deadline: number;
  /** When the handler started, ms on the {@link monotonicNow} clock. */
  readonly arrival: number;
  /** The caller's request metadata (grpc-timeout and transport headers removed by grpc-js). */
  readonly metadata: Metadata;
  /** The call's trace when tracing is on (src/telemetry/tracing/); absent when off. */
  readonly trace?: CallTrace;
}

/** Why a call's signal aborted. */
export type AbortCause = 'deadline' | 'cancelled';

/** Abort reason used when the deadline passes (same name as `AbortSignal.timeout`'s reason). */
export function deadlineReason(): DOMException {
  return stackless(() => new DOMException('deadline exceeded', 'TimeoutError'));
}

/** Abort reason used when the caller cancels. */
export function cancelledReason(): DOMException {
  return stackless(() => new DOMException('call cancelled', 'AbortError'));
}

/** The cause of an aborted signal, or null if it has not aborted. */
export function abortCause(signal: AbortSignalLike): AbortCause | null {
  if (!signal.aborted) return null;
  const reason: unknown = signal.reason;
  return reason instanceof DOMException && reason.name === 'TimeoutError' ? 'deadline' : 'cancelled';
}

/**
 * Stops the pipeline once the caller's deadline has passed or it cancelled. Throws IbexErrors so the
 * server answers DEADLINE_EXCEEDED / CANCELLED, never INTERNAL, even when the clock passes D a tick
 * before the deadline timer aborts the signal.
 */
export function throwIfAborted(ctx: CallContext): void {
  if (abortCause(ctx.signal) === 'cancelled') throw Errors.cancelled();
  if (ctx.signal.aborted || monotonicNow() >= ctx.deadline) throw Errors.deadlineExceeded();
}

/** Milliseconds left until `ctx.deadline` (≥ 0). */
export function remainingMs(ctx: Pick<CallContext, 'deadline'>, now: number = monotonicNow()): number {
  return Math.max(0, ctx.deadline - now);
}

/** The slice of a grpc-js server call this module uses, so tests can pass a fake. */
export interface CallLike {
  readonly metadata: Metadata;
  /** grpc-js: `Date.now()`-based ms (or a Date); `Infinity` when the caller set no deadline. */
  getDeadline(): Date | number;
  readonly cancelled?: boolean;
  on(event: 'cancelled', listener: () => void): unknown;
  removeListener(event: 'cancelled', listener: () => void): unknown;
}

/** A context plus the cleanup the handler must run once it has answered. */
export interface CallContextHandle {
  readonly ctx: CallContext;
  /** Stops the deadline and detaches from the call; does not abort the signal. Idempotent. */
  dispose(): void;
}

/** Time kept between the caller's deadline and ours for the answer's trip back, ms. */
export const CALLER_DEADLINE_MARGIN_MS = 2;

/** grpc-js's deadline timer and ours can disagree by a tick; within this many ms it is the deadline. */
const DEADLINE_SLACK_MS = 2;

/**
 * Builds the {@link CallContext} of one call (contract.md §10).
 *
 * If the deadline has already passed, the returned signal is already aborted with the deadline
 * reason, so the handler can answer DEADLINE_EXCEEDED without doing any work. Must be paired with
 * `dispose()`: grpc-js emits `cancelled` after every finished call, which must not abort a signal
 * the pipeline might still be observing for bookkeeping.
 * @param opts.timeoutMs IBEX_CONTEXT_TIMEOUT in ms (`settings.timeoutMs`).
 * @param opts.arrival handler start on the {@link monotonicNow} clock; defaults to now.
 * @param opts.clock the monotonic clock (tests inject one; default {@link monotonicNow}).
 * @param opts.trace the call's trace (tracing on), handed to the pipeline as `ctx.trace`.
 */
export function createCallContext(
  call: CallLike,
  opts: { timeoutMs: number; arrival?: number; clock?: Clock; trace?: CallTrace },
): CallContextHandle {
  const clock = opts.clock ?? monotonicNow;
  const arrival = opts.arrival ?? clock();
  const signal = new CallSignal();

  const raw = call.getDeadline();
  const callerWallMs = raw instanceof Date ? raw.getTime() : raw;
  let deadline = arrival + opts.timeoutMs;
  if (Number.isFinite(callerWallMs)) {
    // grpc-js reports the caller's deadline on the wall clock; move it onto the monotonic one once. The
    // answer still has to travel back and the caller's timer counts from before the request was sent, so
    // the server finishes CALLER_DEADLINE_MARGIN_MS early rather than answer just after the caller gave up.
    deadline = Math.min(deadline, clock() + (callerWallMs - Date.now()) - CALLER_DEADLINE_MARGIN_MS);
  }

  let timer: ArmedTimer | undefined;
  let disposed = false;
  const abortForDeadline = () => signal.abort(deadlineReason());
  // grpc-js ends the call itself when the caller's deadline passes and reports that as `cancelled`.
  const onCancelled = () => {
    if (signal.aborted) return;
    const callerDeadlinePassed =
      Number.isFinite(callerWallMs) && Date.now() >= callerWallMs - DEADLINE_SLACK_MS;
    const ownDeadlinePassed = clock() >= deadline - DEADLINE_SLACK_MS;
    signal.abort(callerDeadlinePassed || ownDeadlinePassed ? deadlineReason() : cancelledReason());
  };

  const dispose = () => {
    if (disposed) return;
    disposed = true;
    timer?.cancel();
    call.removeListener('cancelled', onCancelled);
  };

  // Unref'd, as the deadline timer always was: a pending call deadline never holds the process open.
  const timers = new DeadlineSet(clock, true);
  const left = deadline - clock();
  if (left <= 0) {
    abortForDeadline();
  } else if (call.cancelled === true) {
    signal.abort(cancelledReason());
  } else {
    call.on('cancelled', onCancelled);
    // The timer re-checks the clock when it fires, so the signal never aborts before D.
    timer = timers.at(deadline, abortForDeadline);
  }

  return {
    ctx: { signal, timer: timers, deadline, arrival, metadata: call.metadata, trace: opts.trace },
    dispose,
  };
}
