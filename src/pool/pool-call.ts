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
  inputOwnedByCaller = true;
  dispatched = false;
  settled = false;
  timer: ArmedTimer | null = null;
  onAbort: (() => void) | null = null;
  readonly signal: AbortSignalLike | undefined;
  readonly scheduler: Scheduler | undefined;
  readonly orgId: string;
  readonly onReturned: ((input: CpuTaskInput) => void) | undefined;
  /** See CpuRunOptions. */
  readonly resultDeadline: number;
  readonly fitsAt: ((now: number) => boolean) | undefined;
  constructor(
    public input: CpuTaskInput,
    readonly submitted: number,
    readonly deadline: number,
    opts: CpuRunOptions,
    readonly resolve: (r: CpuStageResult) => void,
    readonly reject: (err: Error) => void,
    readonly large = false,
  ) {
    this.signal = opts.signal;
    this.orgId = opts.orgId ?? '';
    this.scheduler = opts.timer;
    this.onReturned = opts.onReturned;
    this.fitsAt = opts.fitsAt;
    this.resultDeadline = Math.max(deadline, opts.resultDeadline ?? deadline);
  }

  /** The `fitsAt` verdict at `now`; a throw counts as fitting, so the call is never left unsettled. */
  fits(now: number): boolean {
    if (this.fitsAt === undefined) return true;
    try {
      return this.fitsAt(now);
    } catch {
      return true;
    }
  }
}

/** Why a call ends without its result: flow control under load, so no stack. */
export const noResult = (why: string): Error => stackless(() => new Error(why));

/** Moves the batch's buffers into pool-owned ones, so the caller's views are detached at `run()`. */
export function takeOwnership(input: CpuTaskInput): CpuTaskInput {
  const columns = {} as Record<BatchColumn, ArrayBufferView>;
  for (const name of BATCH_COLUMNS) columns[name] = input[name];
  const moved = structuredClone(columns, { transfer: transferList(input) });
  // Not `{ ...input, ...moved }`: V8 adds properties after a spread through its runtime (µs per call).
  const out = { ...input };
  const outColumns: Record<BatchColumn, ArrayBufferView> = out;
  for (const name of BATCH_COLUMNS) outColumns[name] = moved[name];
  return out;
}
