import type { CpuTaskInput, CpuTaskOutput } from '../cpu-stage/cpu-task.js';
import type { AbortSignalLike } from '../util/abort.js';
import type { Scheduler } from '../util/clock.js';

/** Result of one CPU-stage round-trip. Times in µs. */
export interface CpuStageResult {
  output: CpuTaskOutput;
  /** From `run()` to the worker starting the task. */
  wait_us: number;
  /** The worker's run time (= `output.run_us`) */
  run_us: number;
  /** From `run()` to the result being back. */
  round_trip_us: number;
}

export interface CpuRunOptions {
  /** Aborting withdraws a waiting task, or answers a running one POOL_DEADLINE at once. */
  signal?: AbortSignalLike;
  /** Arms withdrawal and deadline on the call's one timer (`ctx.timer`); default its own. */
  timer?: Scheduler;
  /** The caller's org: the queue is fair across orgs (docs/design/worker-pool.md). Default `""`. */
  orgId?: string;
  onReturned?: (input: CpuTaskInput) => void;
  /** Until when a dispatched task's result is awaited, epoch ms; default and floor `input.deadline`. */
  resultDeadline?: number;
  /** Asked as a queued task reaches a free thread: `false` withdraws it (`unfit`); a throw is `true`. */
  fitsAt?: (now: number) => boolean;
}

export interface CpuPoolOptions {
  /** Worker module; default resolveWorkerFile() */
  filename?: string;
  onError?: (err: Error) => void;
}

/** A queued task is withdrawn this long before its deadline: timers fire late, and it could not return anyway. */
export const WITHDRAW_LEAD_MS = 1;
