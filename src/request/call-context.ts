/** A call's abort signal, absolute deadline D (contract.md §10, monotonic ms) and its one timer. */
import type { Metadata } from '@grpc/grpc-js';
import type { RetrievalResult } from '../retrieval/retrieve.js';
import type { CallTrace } from '../telemetry/tracing/call-trace.js';
import { type AbortSignalLike, CallSignal } from '../util/abort.js';
import { type ArmedTimer, type Clock, DeadlineSet, monotonicNow } from '../util/clock.js';
import { stackless } from '../util/stackless.js';
import { Errors } from '../wire/errors.js';
import type { BranchOutcome, Directive } from '../wire/types.js';

export type { AbortSignalLike };
export { monotonicNow };

export interface CallContext {
  /** Aborts at the deadline (`TimeoutError`) or on caller cancel (`AbortError`). */
  readonly signal: AbortSignalLike;
  /** The call's one timer for every stage deadline; absent in hand-built contexts (stages arm their own). */
  readonly timer?: DeadlineSet;
  /** Absolute deadline D, monotonic ms: min(arrival + IBEX_CONTEXT_TIMEOUT, caller's gRPC deadline). */
  readonly deadline: number;
  /** When the handler started, ms on the {@link monotonicNow} clock. */
  readonly arrival: number;
  /** The caller's request metadata (grpc-timeout and transport headers removed by grpc-js). */
  readonly metadata: Metadata;
  /** The call's trace when tracing is on. */
  readonly trace?: CallTrace;
  /** What the pipeline has read so far, for the answer built at D; only the assembler writes it. */
  readonly gathered: Gathered;
}

/**
 * A call's reads as they end. A slot on the context, not a `WeakMap` keyed by it: V8's scavenges kept such
 * an entry's value (the call's hits) alive until the next mark-compact (docs/design/main-thread.md).
 */
export interface Gathered {
  /** The directive branch's end, told before the memory branches end. */
  directive?: { directive: Directive | null; outcome: BranchOutcome };
  /** The retrieval, once every branch ended. */
  retrieval?: RetrievalResult;
}

export type AbortCause = 'deadline' | 'cancelled';

/** Abort reason used when the deadline passes (same name as `AbortSignal.timeout`'s reason). */
export function deadlineReason(): DOMException {
  return stackless(() => new DOMException('deadline exceeded', 'TimeoutError'));
}

export function cancelledReason(): DOMException {
  return stackless(() => new DOMException('call cancelled', 'AbortError'));
}

/** The cause of an aborted signal, or null if it has not aborted. */
export function abortCause(signal: AbortSignalLike): AbortCause | null {
  if (!signal.aborted) return null;
  const reason: unknown = signal.reason;
  return reason instanceof DOMException && reason.name === 'TimeoutError' ? 'deadline' : 'cancelled';
}

/** Stops the pipeline once past D or cancelled, as an IbexError (never INTERNAL). */
export function throwIfAborted(ctx: CallContext): void {
  if (abortCause(ctx.signal) === 'cancelled') throw Errors.cancelled();
  if (ctx.signal.aborted || monotonicNow() >= ctx.deadline) throw Errors.deadlineExceeded();
}

export function remainingMs(ctx: Pick<CallContext, 'deadline'>, now: number = monotonicNow()): number {
  return Math.max(0, ctx.deadline - now);
}

/** The slice of a grpc-js server call this module uses, so tests can pass a fake. */
export interface CallLike {
  readonly metadata: Metadata;
  /** `Date.now()`-based ms (or a Date); `Infinity` when the caller set no deadline. */
  getDeadline(): Date | number;
  readonly cancelled?: boolean;
  on(event: 'cancelled', listener: () => void): unknown;
  removeListener(event: 'cancelled', listener: () => void): unknown;
}

export interface CallContextHandle {
  readonly ctx: CallContext;
  /**
   * Stops the deadline, detaches from the call and drops what `ctx.gathered` holds (the answer is built by
   * then); does not abort the signal. Idempotent.
   */
  dispose(): void;
}

/** Time kept between the caller's deadline and ours for the answer's trip back, ms. */
export const CALLER_DEADLINE_MARGIN_MS = 2;

/** grpc-js's deadline timer and ours can disagree by a tick; within this many ms it is the deadline. */
const DEADLINE_SLACK_MS = 2;

/**
 * Builds the {@link CallContext} of one call; its signal is already aborted when D has passed. Pair it
 * with `dispose()`: grpc-js emits `cancelled` after every finished call.
 * @param opts.timeoutMs IBEX_CONTEXT_TIMEOUT, ms.
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
    // Wall clock to monotonic; finish a margin early so the answer can travel back in time.
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

  const gathered: Gathered = {};
  const dispose = () => {
    if (disposed) return;
    disposed = true;
    timer?.cancel();
    call.removeListener('cancelled', onCancelled);
    // V8 allocates the context in the old generation once its allocation site looks long-lived, and a
    // dead old object's fields are roots for every scavenge until the next mark-compact: left in place,
    // each finished call's hits would be copied and promoted (docs/design/main-thread.md).
    gathered.directive = undefined;
    gathered.retrieval = undefined;
  };

  const timers = new DeadlineSet(clock, true);
  const left = deadline - clock();
  if (left <= 0) {
    abortForDeadline();
  } else if (call.cancelled === true) {
    signal.abort(cancelledReason());
  } else {
    call.on('cancelled', onCancelled);
    timer = timers.at(deadline, abortForDeadline);
  }

  return {
    ctx: {
      signal,
      timer: timers,
      deadline,
      arrival,
      metadata: call.metadata,
      trace: opts.trace,
      gathered,
    },
    dispose,
  };
}
