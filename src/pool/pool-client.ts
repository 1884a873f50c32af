/**
 * Client of the CPU-stage worker pool (contract.md §1, §10). Piscina owns the threads (spawning,
 * replacing a dead one, idle reaping, heap limits); this client owns the *queue*.
 *
 * Why a queue of our own in front of piscina's, rather than piscina's queue plus an AbortSignal per task:
 * verified against piscina 5.3.2,
 * - aborting a signal after piscina has posted the task to a thread terminates that thread, and "posted"
 *   happens on piscina's side before the worker could report that it started, so a start flag set by the
 *   worker leaves a window in which a deadline abort kills a thread;
 * - tasks that carry a signal wait in piscina's internal skip queue, where `maxQueue` is never checked
 *   (8 queued with maxQueue 2, none rejected) and the order is rotated on every dispatch (0 1 3 5 7 4 2 6).
 * So a task is handed to piscina only when a thread is free for it, and never with a signal: no abort can
 * ever reach piscina, hence no thread is ever terminated to meet a deadline, by construction. Waiting
 * tasks sit in a {@link FairQueue} here (one FIFO per org, served round-robin: contract.md §1 isolation rule);
 * the deadline and the caller's AbortSignal withdraw them from it.
 *
 * Large tasks (≥ `largeTaskBytes` of text: a multi-MB history or markup-heavy memories, tens of ms each)
 * hold at most all threads but one. The fair queue orders only what waits: without this, one org's large
 * calls could fill every thread, and any other org's 0.2 ms task would wait for one of them to finish
 * (docs/design/worker-pool.md, "Large tasks leave a thread free"). A large task therefore
 * waits, in its place, while the other running ones are large, and the last thread stays free for the
 * small tasks of every org.
 */
import { Piscina } from 'piscina';
import { LARGE_TASK_BYTES, type PoolSettings } from '../config/settings.js';
import {
  type CpuTaskInput,
  type CpuTaskOutput,
  transferList,
  validateTaskInput,
  warmupInput,
} from '../cpu-stage/cpu-task.js';
import { afterPendingIo, armAt, monotonicNow } from '../util/clock.js';
import { Errors } from '../wire/errors.js';
import { FairQueue } from './fair-queue.js';
import { Call, noResult, takeOwnership } from './pool-call.js';
import { PoolCounts, type PoolStats, summarize } from './pool-stats.js';
import {
  type CpuPoolOptions,
  type CpuRunOptions,
  type CpuStageResult,
  WITHDRAW_LEAD_MS,
} from './pool-types.js';
import { resolveWorkerFile } from './worker-file.js';

export { type LatencySummary, type PoolStats, UTILIZATION_TAU_MS } from './pool-stats.js';
export type { CpuRunOptions, CpuStageResult } from './pool-types.js';

/** piscina's wait for running tasks on close before it terminates the threads. */
const CLOSE_TIMEOUT_MS = 10_000;

/**
 * The CPU-stage pool: pack + format in Piscina worker threads, candidate batches transferred, the
 * deadline covering the whole round-trip (contract.md §10).
 */
export class CpuPool {
  readonly #piscina: Piscina<CpuTaskInput, CpuTaskOutput>;
  readonly #capacity: number;
  readonly #maxQueue: number;
  readonly #queue = new FairQueue<Call>();
  #running = 0;
  /** Text bytes from which a task is large; Infinity = no limit. */
  readonly #largeTaskBytes: number;
  /** Large tasks that may run at once: all threads but one (all of one thread). */
  readonly #largeCapacity: number;
  #largeRunning = 0;
  /** Whether a queued call may take a free thread now (large ones only within their capacity). */
  readonly #mayRun = (call: Call): boolean => !call.large || this.#largeRunning < this.#largeCapacity;
  #closed = false;
  #closing: Promise<void> | null = null;
  /** Calls by how they ended, wait and run times, thread busyness: what {@link stats} reports. */
  readonly #counts = new PoolCounts(monotonicNow());

  private constructor(settings: PoolSettings, options: CpuPoolOptions) {
    this.#piscina = new Piscina<CpuTaskInput, CpuTaskOutput>({
      filename: options.filename ?? resolveWorkerFile(),
      minThreads: settings.minThreads,
      maxThreads: settings.maxThreads,
      idleTimeout: settings.idleTimeoutMs,
      // One task per thread: a DP holds its thread until it returns, and the balancer must never stack.
      concurrentTasksPerWorker: 1,
      resourceLimits: { maxOldGenerationSizeMb: settings.maxOldGenerationMb },
      closeTimeout: CLOSE_TIMEOUT_MS,
      // Wait and run times are our own histograms (stats()); piscina's would be recorded for nobody.
      recordTiming: false,
    });
    this.#capacity = settings.maxThreads;
    this.#maxQueue = settings.maxQueue;
    const largeBytes = settings.largeTaskBytes ?? LARGE_TASK_BYTES;
    this.#largeTaskBytes = largeBytes > 0 ? largeBytes : Number.POSITIVE_INFINITY;
    this.#largeCapacity = Math.max(1, settings.maxThreads - 1);
    // Without a listener an 'error' event would throw and take the process down.
    this.#piscina.on('error', (err: Error) => options.onError?.(err));
  }

  /**
   * Starts the pool and warms every minimum thread: the worker module loads (which JIT-warms the packer
   * and formatter with real tasks), then each thread runs one real pack + format. Resolves once all have.
   * @param settings `IBEX_CONTEXT_POOL_*` (min/max threads, max queue, idle timeout, heap limit).
   * @throws IbexError `IBEX_ERR_POOL_TASK_FAILED` when a warm-up task fails (e.g. the worker file is missing:
   *   run `npm run build`); the threads are stopped first.
   */
  static async start(settings: PoolSettings, options: CpuPoolOptions = {}): Promise<CpuPool> {
    const pool = new CpuPool(settings, options);
    try {
      await pool.#warm(Math.max(1, settings.minThreads));
    } catch (err) {
      // destroy, not close: close waits for threads to drain, and a thread that cannot even load its
      // module never reports drained.
      pool.#closed = true;
      await pool.#piscina.destroy();
      throw err;
    }
    pool.#counts.reset(monotonicNow());
    return pool;
  }

  async #warm(count: number): Promise<void> {
    const seen = new Set<number>();
    // All tasks are dispatched at once, one per free thread, so one round covers every thread; more rounds
    // only guard against a thread that was still being replaced.
    for (let round = 0; round < 3; round++) {
      // warmupInput's deadline is a minute away: start-up waits for slow module loads, not for a budget.
      const batch = Array.from({ length: count }, () => this.run(warmupInput(30, 400, 2400)));
      for (const r of await Promise.all(batch)) seen.add(r.output.thread_id);
      if (this.threadIds().every((id) => seen.has(id))) return;
    }
  }

  /**
   * Runs one CPU task: dispatched at once when a thread is free, else queued until one is. Queued tasks
   * leave round-robin across orgs (`opts.orgId`), first in first out within an org.
   * Ownership of the batch's buffers passes to the pool: after `run()` returns, the caller's typed arrays
   * (BATCH_COLUMNS) are detached (transferred to the worker, or moved into the queue).
   *
   * Deadline (`input.deadline`, epoch ms): a task still waiting {@link WITHDRAW_LEAD_MS} before it is
   * withdrawn; a running task stops its DP cooperatively and returns on the greedy path before it; should a
   * result still be missing at the deadline, the call is answered then (within timer granularity) and the
   * thread finishes undisturbed, its result discarded. No thread is ever terminated for a deadline.
   * @throws IbexError `IBEX_ERR_POOL_SATURATED` at once when no thread is free and `maxQueue` tasks wait
   *   (unless another org has at least two more waiting: then that org's newest waiting call is refused
   *   instead, with this error, and this call is queued);
   *   `IBEX_ERR_POOL_DEADLINE` when the deadline or `opts.signal` ends the call before a result (cause: the
   *   signal's reason, if any); `IBEX_ERR_POOL_TASK_FAILED` when the task throws, its thread dies, the batch
   *   is malformed or detached, or the pool is closed.
   */
  run(input: CpuTaskInput, opts: CpuRunOptions = {}): Promise<CpuStageResult> {
    const submitted = monotonicNow();
    const { signal } = opts;
    return new Promise<CpuStageResult>((resolve, reject) => {
      if (this.#closed) {
        this.#counts.failed++;
        reject(Errors.poolTaskFailed(new Error('the CPU pool is closed')));
        return;
      }
      try {
        validateTaskInput(input);
      } catch (err) {
        this.#counts.failed++;
        reject(Errors.poolTaskFailed(err));
        return;
      }
      if (signal?.aborted) {
        this.#counts.withdrawn++;
        reject(Errors.poolDeadline('withdrawn', signal.reason));
        return;
      }
      if (!(input.deadline > submitted)) {
        this.#counts.withdrawn++;
        reject(Errors.poolDeadline('withdrawn', noResult('deadline passed before dispatch')));
        return;
      }
      const large = input.text.byteLength + input.history.byteLength >= this.#largeTaskBytes;
      const call = new Call(input, submitted, input.deadline, opts, resolve, reject, large);
      const { orgId } = call;
      if (this.#running < this.#capacity && this.#queue.size === 0 && this.#mayRun(call)) {
        this.#dispatch(call);
      } else if (
        this.#queue.size >= this.#maxQueue &&
        // A call that could not be queued anyway must not cost another org its place.
        (call.deadline - WITHDRAW_LEAD_MS <= submitted || !this.#shedForOrg(orgId))
      ) {
        this.#counts.rejected++;
        reject(Errors.poolSaturated());
        return;
      } else if (call.deadline - WITHDRAW_LEAD_MS <= submitted) {
        this.#counts.withdrawn++;
        reject(Errors.poolDeadline('withdrawn', noResult('deadline too close to queue the task')));
        return;
      } else {
        call.input = takeOwnership(input);
        call.inputOwnedByCaller = false;
        this.#queue.push(orgId, call);
        // A thread can be free while large calls wait for their capacity: this call may take it.
        if (this.#running < this.#capacity) this.#pump();
      }
      this.#arm(call);
      if (signal) {
        call.onAbort = () => this.#end(call, signal.reason);
        signal.addEventListener('abort', call.onAbort, { once: true });
      }
    });
  }

  /**
   * Full queue: refuses the newest waiting call of the org with the most waiting calls, if that org has at
   * least two more than `orgId`, so that a flooding org cannot lock others out of the queue.
   * @returns whether room was made.
   */
  #shedForOrg(orgId: string): boolean {
    const victim = this.#queue.shedFor(orgId);
    if (victim === null) return false;
    this.#counts.rejected++;
    this.#settle(victim);
    victim.reject(Errors.poolSaturated());
    return true;
  }

  /** Timer for the call's next decision: withdrawal while queued, the deadline once dispatched. */
  #arm(call: Call): void {
    const at = call.dispatched ? call.resultDeadline : call.deadline - WITHDRAW_LEAD_MS;
    const fire = () => this.#onTimer(call);
    call.timer = call.scheduler ? call.scheduler.at(at, fire) : armAt(at, fire);
  }

  #onTimer(call: Call): void {
    call.timer = null;
    if (call.settled) return;
    // Armed for the withdrawal time, but dispatched since: the running task keeps its time until D.
    if (call.dispatched && monotonicNow() < call.resultDeadline) {
      this.#arm(call);
      return;
    }
    if (!call.dispatched) {
      this.#end(call, noResult('CPU stage deadline reached'));
      return;
    }
    // The result may already wait in the thread's port behind a late loop turn: read it first.
    afterPendingIo(() => this.#end(call, noResult('CPU stage deadline reached')));
  }

  /**
   * Ends a call before its result with IBEX_ERR_POOL_DEADLINE: withdrawn if still queued, abandoned
   * (thread left running) if not; the error's `poolReason` says which.
   */
  #end(call: Call, cause: unknown): void {
    if (call.settled) return;
    const reason = call.dispatched ? 'abandoned' : 'withdrawn';
    if (call.dispatched) {
      this.#counts.abandoned++;
    } else {
      this.#queue.remove(call);
      this.#counts.withdrawn++;
    }
    this.#settle(call);
    call.reject(Errors.poolDeadline(reason, cause));
  }

  #settle(call: Call): void {
    call.settled = true;
    if (!call.dispatched && !call.inputOwnedByCaller) call.onReturned?.(call.input);
    call.timer?.cancel();
    call.timer = null;
    if (call.onAbort) call.signal?.removeEventListener('abort', call.onAbort);
    call.onAbort = null;
  }

  #dispatch(call: Call): void {
    call.dispatched = true;
    if (call.large) this.#largeRunning++;
    this.#setRunning(this.#running + 1);
    // A free slot may still have no thread ready for it (piscina starting one above minThreads, or
    // replacing a dead one): piscina then holds the task briefly, so take the buffers now as promised.
    if (this.#piscina.idleThreads === 0 && call.inputOwnedByCaller) call.input = takeOwnership(call.input);
    let pending: Promise<CpuTaskOutput>;
    try {
      // No signal, ever: see the module comment. Transfer, not clone: the buffers detach here.
      pending = this.#piscina.run(call.input, { transferList: transferList(call.input) });
    } catch (err) {
      pending = Promise.reject(err);
    }
    pending.then(
      (output) => this.#onResult(call, output),
      (err: unknown) => this.#onFailure(call, err),
    );
  }

  #onResult(call: Call, output: CpuTaskOutput): void {
    if (call.large) this.#largeRunning--;
    this.#setRunning(this.#running - 1);
    this.#counts.runUs.recordValue(Math.round(output.run_us));
    if (!call.settled) {
      const now = monotonicNow();
      const wait_us = Math.max(0, (output.started_at - call.submitted) * 1000);
      this.#counts.waitUs.recordValue(Math.round(wait_us));
      this.#counts.completed++;
      this.#settle(call);
      call.resolve({ output, wait_us, run_us: output.run_us, round_trip_us: (now - call.submitted) * 1000 });
    }
    this.#pump();
  }

  #onFailure(call: Call, err: unknown): void {
    if (call.large) this.#largeRunning--;
    this.#setRunning(this.#running - 1);
    if (!call.settled) {
      this.#counts.failed++;
      this.#settle(call);
      call.reject(Errors.poolTaskFailed(err));
    }
    this.#pump();
  }

  /**
   * Hands waiting tasks to free threads, round-robin across orgs and oldest first within one (a large task
   * waits while the large capacity is taken, and small ones may pass it); a task already at its withdrawal
   * time, or one its caller no longer expects to fit (`CpuRunOptions.fitsAt`), leaves instead.
   */
  #pump(): void {
    while (this.#running < this.#capacity && this.#queue.size > 0) {
      const call = this.#queue.shiftWhere(this.#mayRun);
      if (call === null) return;
      const now = monotonicNow();
      if (now >= call.deadline - WITHDRAW_LEAD_MS) {
        this.#end(call, noResult('CPU stage deadline reached in the queue'));
        continue;
      }
      if (!call.fits(now)) {
        // Not `#end`: counted apart from deadline withdrawals, so the rule's effect can be seen.
        this.#counts.unfit++;
        this.#settle(call);
        call.reject(
          Errors.poolDeadline(
            'withdrawn',
            noResult('CPU stage no longer fits the time left after its queue wait'),
          ),
        );
        continue;
      }
      this.#dispatch(call);
    }
  }

  #setRunning(running: number): void {
    this.#counts.busy.update(monotonicNow(), Math.min(1, this.#running / this.#capacity));
    this.#running = running;
  }

  /** Current figures (see {@link PoolStats}). */
  stats(): PoolStats {
    const counts = this.#counts;
    counts.busy.update(monotonicNow(), Math.min(1, this.#running / this.#capacity));
    return {
      queueSize: this.#queue.size + this.#piscina.queueSize,
      running: this.#running,
      largeRunning: this.#largeRunning,
      utilization: counts.busy.value,
      threads: this.#piscina.threads.length,
      capacity: this.#capacity,
      maxQueue: this.#maxQueue,
      completed: counts.completed,
      withdrawn: counts.withdrawn,
      rejected: counts.rejected,
      failed: counts.failed,
      abandoned: counts.abandoned,
      unfit: counts.unfit,
      waitUs: summarize(counts.waitUs),
      runUs: summarize(counts.runUs),
    };
  }

  /** Thread ids of the live workers (tests use them to prove no thread was replaced). */
  threadIds(): number[] {
    return this.#piscina.threads.map((w) => w.threadId);
  }

  /**
   * Stops the pool: queued calls fail (IBEX_ERR_POOL_TASK_FAILED), running tasks finish (up to 10 s), then
   * the threads exit. Idempotent.
   */
  async close(): Promise<void> {
    if (!this.#closing) {
      this.#closed = true;
      for (const call of this.#queue.drain()) {
        this.#counts.failed++;
        this.#settle(call);
        call.reject(Errors.poolTaskFailed(new Error('the CPU pool closed before the task ran')));
      }
      this.#closing = this.#piscina.close();
    }
    await this.#closing;
  }
}
