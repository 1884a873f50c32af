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

/** Share of the time left at dispatch always kept for the degraded answer (docs/design/request-path.md). */
export const LONG_DEADLINE_KEEP_SHARE = 0.05;

export interface CpuOutcome {
  stage: CpuStageResult | null;
  poolReason: string | null;
}

function poolReasonOf(err: unknown): string {
  if (isIbexError(err, 'IBEX_ERR_POOL_SATURATED')) return 'pool_saturated';
  if (isIbexError(err, 'IBEX_ERR_POOL_DEADLINE')) return 'pool_deadline';
  return 'pool_failed';
}

export interface CpuStageDeps {
  pool: CpuPool;
  reserve: StageReserve;
  observer: AssemblyObserver;
  logger: Logger;
  dpCellCeiling: number;
}

export class CpuStageRunner {
  readonly #deps: CpuStageDeps;
  /** Calls waiting for their CPU-stage result (queued or running) */
  #awaitingPool = 0;

  constructor(deps: CpuStageDeps) {
    this.#deps = deps;
  }

  /** Whether the task carries the request's own buffer (a large history, not copied). */
  #takesRequestBytes(req: ValidatedRequest, input: CpuTaskInput): boolean {
    return input.history.length > 0 && input.history.buffer === req.history.source.buffer;
  }

  /** Until when the result is awaited, monotonic ms: D if the task takes the request's bytes, else its deadline. */
  #resultAwaitedUntil(req: ValidatedRequest, ctx: CallContext, input: CpuTaskInput): number {
    return this.#takesRequestBytes(req, input) ? ctx.deadline : input.deadline;
  }

  /** Whether the stage is skipped for want of time; the call is then answered L2 `pool_deadline` at once. */
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
   * The CPU stage's deadline, monotonic ms: D minus the degraded reserve, room for the degraded answers of
   * calls queued with ours (at most half of what is left), and {@link LONG_DEADLINE_KEEP_SHARE}.
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
   * Runs the CPU stage in the pool; pool trouble and shedding give no result and a reason.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` (over-long content), or the caller's deadline/cancellation.
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
    // Once it runs, a task holding the request buffer leaves nothing for the degraded answer: await it until D.
    const takesRequest = this.#takesRequestBytes(req, input);
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
        // The buffer comes back if the task never ran; the degraded answer is built from it.
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
    // Teaches the per-MiB reserve too, so a pessimistic prior cannot refuse large histories forever.
    this.#deps.reserve.recordStageRun(stage.run_us / 1000, historyBytes);
    if (stage.output.invalid !== null) throw Errors.invalidArgument('message.content', stage.output.invalid);
    this.#deps.observer.cpuStageDone(stage);
    // Expected and counted by ibex_context_packer_path_total: debug, not a warning per call.
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
