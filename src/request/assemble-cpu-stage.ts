/**
 * The assembly's CPU stage (contract.md §1, §10): its deadline, whether it can still fit, and its run in the
 * pool, whose trouble (queue full, deadline, failure) and load shedding give no result and a reason.
 */
import type { Logger } from 'pino';
import type { CpuTaskInput } from '../cpu-stage/cpu-task.js';
import type { CpuPool, CpuStageResult } from '../pool/pool-client.js';
import { callLogger } from '../telemetry/tracing/call-logger.js';
import { monotonicNow } from '../util/clock.js';
import { Errors, isIbexError } from '../wire/errors.js';
import { historyLost } from './answers.js';
import type { AssemblyObserver } from './assembly-observer.js';
import { type CallContext, throwIfAborted } from './call-context.js';
import { PER_MIB_FROM_BYTES, type StageReserve } from './stage-reserve.js';
import type { ValidatedRequest } from './validate.js';

/**
 * Share of the time left at the CPU stage's dispatch that is always kept for the degraded answer (contract.md §10).
 * Nothing at the default 45 ms (≤ 2 ms of the ≤ 40 ms left, under the measured reserve); 40 ms of 800 ms.
 * On a loaded 2-core machine a process's first miss (priors, a cold degraded answer, a timer 5–6 ms late)
 * answered an 800 ms call 0.03 ms after D (test/telemetry/metrics.test.ts under two busy loops).
 */
export const LONG_DEADLINE_KEEP_SHARE = 0.05;

/** The CPU stage's outcome: its result, or why there is none (`null` when it answered). */
export interface CpuOutcome {
  stage: CpuStageResult | null;
  poolReason: string | null;
}

function poolReasonOf(err: unknown): string {
  if (isIbexError(err, 'IBEX_ERR_POOL_SATURATED')) return 'pool_saturated';
  if (isIbexError(err, 'IBEX_ERR_POOL_DEADLINE')) return 'pool_deadline';
  return 'pool_failed';
}

/** What the CPU stage runs on; the assembler's. */
export interface CpuStageDeps {
  pool: CpuPool;
  reserve: StageReserve;
  observer: AssemblyObserver;
  logger: Logger;
  /** `settings.dpCellCeiling`, reported when the packer fell back to greedy. */
  dpCellCeiling: number;
}

/** The CPU stage of one assembler's calls. */
export class CpuStageRunner {
  readonly #deps: CpuStageDeps;
  /** Calls waiting for their CPU-stage result (queued or running). */
  #awaitingPool = 0;

  constructor(deps: CpuStageDeps) {
    this.#deps = deps;
  }

  /** Whether the task carries the request's own buffer (a large history, not copied: cpu-batch-encode.ts). */
  #takesRequestBytes(req: ValidatedRequest, input: CpuTaskInput): boolean {
    return input.history.length > 0 && input.history.buffer === req.history.source.buffer;
  }

  /**
   * Until when the task's result is awaited, ms on the monotonic clock: D for a task that takes the
   * request's bytes (once it runs, nothing is left to build the degraded answer from), its own deadline
   * otherwise.
   */
  #resultAwaitedUntil(req: ValidatedRequest, ctx: CallContext, input: CpuTaskInput): number {
    return this.#takesRequestBytes(req, input) ? ctx.deadline : input.deadline;
  }

  /**
   * Whether the CPU stage is skipped for want of time (contract.md §10, never wait for a stage that cannot
   * finish): retrieval ended past its wall (a busy event loop) and left less than the share it was meant
   * to, and the CPU task would get less than its measured round-trip; or the history is large and its
   * typical CPU-stage run per MiB does not fit the task's time (`StageReserve.stageTooLong`): until D for
   * a task that takes the request's bytes (its result is awaited until D), until its own deadline
   * otherwise. The call is answered L2 `pool_deadline` at once from what is at hand, instead of waiting
   * for a withdrawal that a late timer reports after D, or for a task that would take the history's bytes
   * past D.
   */
  cannotFit(
    req: ValidatedRequest,
    ctx: CallContext,
    input: CpuTaskInput,
    shareMs: number,
    historyBytes: number,
  ): boolean {
    const now = monotonicNow();
    return (
      (ctx.deadline - now < shareMs && !this.#deps.reserve.cpuStageFits(input.deadline - now)) ||
      this.#deps.reserve.stageTooLong(this.#resultAwaitedUntil(req, ctx, input) - now, historyBytes)
    );
  }

  /**
   * The CPU stage's deadline, ms on the monotonic clock: D minus the measured degraded-answer reserve.
   * Calls queued for the pool with ours may miss their deadlines at the same instant, and their degraded
   * answers are then built one after another on this thread: room for them too (at most half of what is
   * left, so a queue never starves the CPU stage of a short deadline). A long deadline also keeps
   * {@link LONG_DEADLINE_KEEP_SHARE} of what is left: the measured reserve is a p99 of past calls, and a
   * call with seconds to spare has no reason to risk its answer on it.
   */
  deadline(ctx: CallContext, historyBytes: number): number {
    const left = Math.max(0, ctx.deadline - monotonicNow());
    const keep = Math.max(
      this.#deps.reserve.degradedMs(historyBytes) * (1 + this.#awaitingPool),
      LONG_DEADLINE_KEEP_SHARE * left,
    );
    return ctx.deadline - Math.min(keep, left / 2);
  }

  /**
   * Runs the CPU stage in the pool. Pool trouble (queue full, deadline, failure) and load shedding give
   * no result and a reason; an over-long history content found there is INVALID_ARGUMENT (contract.md §11).
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT`, or the caller's deadline/cancellation.
   */
  async run(
    req: ValidatedRequest,
    ctx: CallContext,
    input: CpuTaskInput,
    shed: boolean,
    historyBytes: number,
  ): Promise<CpuOutcome> {
    if (shed) return { stage: null, poolReason: 'shed' };
    let stage: CpuStageResult;
    // A task that takes the request buffer along leaves nothing to build the degraded answer from once
    // it runs: then its result is worth waiting for until D itself, not D minus the degraded reserve.
    const takesRequest = this.#takesRequestBytes(req, input);
    // Re-judged when a queued task reaches a thread: its queue wait may have eaten the time it had.
    const awaitedUntil = this.#resultAwaitedUntil(req, ctx, input);
    const fitsAt =
      historyBytes >= PER_MIB_FROM_BYTES
        ? (now: number) => !this.#deps.reserve.stageTooLong(awaitedUntil - now, historyBytes)
        : undefined;
    this.#awaitingPool++;
    try {
      stage = await this.#deps.pool.run(input, {
        signal: ctx.signal,
        orgId: req.orgId,
        timer: ctx.timer,
        // A request buffer transferred with the task comes back if the task never ran: the degraded
        // answer is built from it (same offsets: the view is the one that was sent).
        onReturned: (back) => {
          if (historyLost(req.history)) req.history.source = back.history;
        },
        resultDeadline: takesRequest ? ctx.deadline : undefined,
        fitsAt,
      });
    } catch (err) {
      if (isIbexError(err, 'IBEX_ERR_POOL_DEADLINE'))
        this.#deps.reserve.lateness.record(monotonicNow() - input.deadline);
      throwIfAborted(ctx);
      const poolReason = poolReasonOf(err);
      if (poolReason === 'pool_failed')
        callLogger(this.#deps.logger, ctx.trace).error(
          { err },
          'CPU stage failed; answering without memories',
        );
      return { stage: null, poolReason };
    } finally {
      this.#awaitingPool--;
    }
    this.#deps.reserve.roundTrip.record(stage.round_trip_us / 1000);
    // The CPU stage does all the degraded answer's work on the history (and more): its cost teaches the
    // per-MiB reserve too, so a pessimistic prior cannot refuse large histories forever.
    this.#deps.reserve.recordStageRun(stage.run_us / 1000, historyBytes);
    if (stage.output.invalid !== null) throw Errors.invalidArgument('message.content', stage.output.invalid);
    this.#deps.observer.cpuStageDone(stage);
    // An expected path (every unlimited budget over many candidates passes the cell ceiling), counted by
    // ibex_context_packer_path_total: a debug line, not a warning per call.
    if (stage.output.pack.path === 'greedy') {
      callLogger(this.#deps.logger, ctx.trace).debug(
        {
          n: stage.output.pack.candidates_evaluated,
          buckets: Math.max(1, Math.floor((stage.output.budget?.usable_budget ?? 0) / 16)),
          cells: stage.output.pack.cells,
          ceiling: this.#deps.dpCellCeiling,
          reason: stage.output.pack.greedy_reason,
        },
        'packer fell back to greedy',
      );
    }
    return { stage, poolReason: null };
  }
}
