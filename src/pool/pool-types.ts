/** The pool client's options, call options and result (pool-client.ts), apart so pool-call.ts can name them. */
import type { CpuTaskInput, CpuTaskOutput } from '../cpu-stage/cpu-task.js';
import type { AbortSignalLike } from '../util/abort.js';
import type { Scheduler } from '../util/clock.js';

/** Result of one CPU-stage round-trip. Times in µs. */
export interface CpuStageResult {
  output: CpuTaskOutput;
  /** From `run()` to the worker starting the task: queue wait plus dispatch. */
  wait_us: number;
  /** The worker's run time (= `output.run_us`). */
  run_us: number;
  /** From `run()` to the result being back on the calling thread. */
  round_trip_us: number;
}

/** Options of one call. */
export interface CpuRunOptions {
  /** The call's signal: aborting withdraws a waiting task, or answers a running one POOL_DEADLINE at once. */
  signal?: AbortSignalLike;
  /** Arms the call's withdrawal and deadline on the call's one timer (`ctx.timer`); default its own. */
  timer?: Scheduler;
  /**
   * The caller's org id: the queue is fair across orgs (round-robin between per-org FIFOs; a full queue
   * sheds the org with the most waiting calls first). Calls without one share the org `""`.
   */
  orgId?: string;
  /** Gets the batch back when a queued call is given up before it ran (the request buffer). */
  onReturned?: (input: CpuTaskInput) => void;
  /** Until when a dispatched task's result is awaited, epoch ms; default and floor `input.deadline`. */
  resultDeadline?: number;
  /**
   * Asked when a queued task is about to take a free thread, with the monotonic time then (ms): `false`
   * withdraws it (IBEX_ERR_POOL_DEADLINE, `withdrawn`; `onReturned` gets its batch back; counted `unfit`)
   * instead of dispatching it. For a task whose expected run no longer fits the time its queue wait left
   * (contract.md §10: never wait for a stage that cannot finish). Not asked when `run()` finds a thread free and
   * nothing waiting (the caller has just judged it); a throw counts as `true`.
   */
  fitsAt?: (now: number) => boolean;
}

/** Options for tests and benches; the service uses the defaults. */
export interface CpuPoolOptions {
  /** Worker module; default `resolveWorkerFile()` (worker-file.ts). */
  filename?: string;
  /** Errors piscina reports outside any task (e.g. a thread failing between tasks). */
  onError?: (err: Error) => void;
}

/**
 * A queued task is withdrawn this long before its deadline. Node's timers are ms-granular (and measured
 * from a loop time that may be stale), so a timer set "at" the deadline usually fires after it; and a task
 * that has not started 1 ms before its deadline could not return in time anyway (the worker keeps ≥ 1 ms
 * of reserve for greedy + format + return).
 */
export const WITHDRAW_LEAD_MS = 1;
