/** One CpuPool call's bookkeeping, and the move of its batch into pool-owned buffers. */

import { BATCH_COLUMNS, type BatchColumn, type CpuTaskInput, transferList } from '../cpu-stage/cpu-batch.js';
import type { AbortSignalLike } from '../util/abort.js';
import type { ArmedTimer, Scheduler } from '../util/clock.js';
import { stackless } from '../util/stackless.js';
import type { FairEntry } from './fair-queue.js';
import type { CpuRunOptions, CpuStageResult } from './pool-types.js';

/** One call, from `run()` until its promise settles (and, if dispatched, until its task returns). */
export class Call implements FairEntry {
  fqPrev: FairEntry | null = null;
  fqNext: FairEntry | null = null;
  fqLine: FairEntry['fqLine'] = null;
  /** False once the batch's buffers were moved into pool-owned ones. */
  inputOwnedByCaller = true;
  dispatched = false;
  settled = false;
  timer: ArmedTimer | null = null;
  onAbort: (() => void) | null = null;
  readonly signal: AbortSignalLike | undefined;
  /** The call's one timer, when the caller has one (`CpuRunOptions.timer`). */
  readonly scheduler: Scheduler | undefined;
  readonly orgId: string;
  readonly onReturned: ((input: CpuTaskInput) => void) | undefined;
  /** When a dispatched call stops waiting for its result (see `CpuRunOptions.resultDeadline`). */
  readonly resultDeadline: number;
  /** See `CpuRunOptions.fitsAt`. */
  readonly fitsAt: ((now: number) => boolean) | undefined;
  constructor(
    public input: CpuTaskInput,
    readonly submitted: number,
    readonly deadline: number,
    opts: CpuRunOptions,
    readonly resolve: (r: CpuStageResult) => void,
    readonly reject: (err: Error) => void,
    /** A large task (`PoolSettings.largeTaskBytes`): it may not take the last free thread. */
    readonly large = false,
  ) {
    this.signal = opts.signal;
    this.orgId = opts.orgId ?? '';
    this.scheduler = opts.timer;
    this.onReturned = opts.onReturned;
    this.fitsAt = opts.fitsAt;
    this.resultDeadline = Math.max(deadline, opts.resultDeadline ?? deadline);
  }

  /**
   * The call's `fitsAt` verdict at `now`; true without one. A throwing check must not leave the call
   * out of the queue and unsettled (it runs inside the dispatch loop): it counts as fitting, as when submitted.
   */
  fits(now: number): boolean {
    if (this.fitsAt === undefined) return true;
    try {
      return this.fitsAt(now);
    } catch {
      return true;
    }
  }
}

/** Why a call ends without its result: flow control under load, so built without a stack (util/stackless.ts). */
export const noResult = (why: string): Error => stackless(() => new Error(why));

/**
 * Moves the batch's buffers into new ones owned by the pool (zero-copy: a transfer to ourselves), so the
 * caller's views are detached at `run()` even when the task has to wait for a thread.
 */
export function takeOwnership(input: CpuTaskInput): CpuTaskInput {
  const columns = {} as Record<BatchColumn, ArrayBufferView>;
  for (const name of BATCH_COLUMNS) columns[name] = input[name];
  const moved = structuredClone(columns, { transfer: transferList(input) });
  // A plain copy whose existing keys are then overwritten: V8 11 adds properties after a spread
  // (`{ ...input, ...moved }`) through its runtime, several µs per queued call.
  const out = { ...input };
  const outColumns: Record<BatchColumn, ArrayBufferView> = out;
  for (const name of BATCH_COLUMNS) outColumns[name] = moved[name];
  return out;
}
