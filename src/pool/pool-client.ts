/** The CPU-stage pool: piscina owns the threads, this client the queue (docs/design/worker-pool.md). */
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

const CLOSE_TIMEOUT_MS = 10_000;

export class CpuPool {
  readonly #piscina: Piscina<CpuTaskInput, CpuTaskOutput>;
  readonly #capacity: number;
  readonly #maxQueue: number;
  readonly #queue = new FairQueue<Call>();
  #running = 0;
  /** Text bytes from which a task is large; Infinity = no limit. */
  readonly #largeTaskBytes: number;
  /** All threads but one (all of one thread) */
  readonly #largeCapacity: number;
  #largeRunning = 0;
  readonly #mayRun = (call: Call): boolean => !call.large || this.#largeRunning < this.#largeCapacity;
  #closed = false;
  #closing: Promise<void> | null = null;
  readonly #counts = new PoolCounts(monotonicNow());

  private constructor(settings: PoolSettings, options: CpuPoolOptions) {
    this.#piscina = new Piscina<CpuTaskInput, CpuTaskOutput>({
      filename: options.filename ?? resolveWorkerFile(),
      minThreads: settings.minThreads,
      maxThreads: settings.maxThreads,
      idleTimeout: settings.idleTimeoutMs,
      // A DP holds its thread until it returns; the balancer must never stack tasks.
      concurrentTasksPerWorker: 1,
      resourceLimits: { maxOldGenerationSizeMb: settings.maxOldGenerationMb },
      closeTimeout: CLOSE_TIMEOUT_MS,
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

  /** Starts the pool; warms every minimum thread. @throws IbexError `IBEX_ERR_POOL_TASK_FAILED`. */
  static async start(settings: PoolSettings, options: CpuPoolOptions = {}): Promise<CpuPool> {
    const pool = new CpuPool(settings, options);
    try {
      await pool.#warm(Math.max(1, settings.minThreads));
    } catch (err) {
      // destroy, not close: a thread that cannot load its module never reports drained.
      pool.#closed = true;
      await pool.#piscina.destroy();
      throw err;
    }
    pool.#counts.reset(monotonicNow());
    return pool;
  }

  async #warm(count: number): Promise<void> {
    const seen = new Set<number>();
    for (let round = 0; round < 3; round++) {
      // Start-up waits for slow module loads, not for a budget: the warm-up deadline is a minute away.
      const batch = Array.from({ length: count }, () => this.run(warmupInput(30, 400, 2400)));
      for (const r of await Promise.all(batch)) seen.add(r.output.thread_id);
      if (this.threadIds().every((id) => seen.has(id))) return;
    }
  }

  /**
   * Runs one CPU task: at once on a free thread, else queued (round-robin across `opts.orgId`). The
   * batch's buffers pass to the pool: the caller's typed arrays are detached after `run()`. A task waiting
   * {@link WITHDRAW_LEAD_MS} before `input.deadline` (epoch ms) is withdrawn; a running one is answered at
   * the deadline and its thread finishes undisturbed.
   * @throws IbexError `IBEX_ERR_POOL_SATURATED` when the queue is full (or this call displaced another
   *   org's); `IBEX_ERR_POOL_DEADLINE` when the deadline or `opts.signal` ends the call first;
   *   `IBEX_ERR_POOL_TASK_FAILED` when the task throws, its thread dies, the batch is bad or the pool closed.
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
        if (this.#running < this.#capacity) this.#pump();
      }
      this.#arm(call);
      if (signal) {
        call.onAbort = () => this.#end(call, signal.reason);
        signal.addEventListener('abort', call.onAbort, { once: true });
      }
    });
  }

  /** Full queue: refuses the largest org's newest call if it has two more waiting than `orgId`; true if so. */
  #shedForOrg(orgId: string): boolean {
    const victim = this.#queue.shedFor(orgId);
    if (victim === null) return false;
    this.#counts.rejected++;
    this.#settle(victim);
    victim.reject(Errors.poolSaturated());
    return true;
  }

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
    // piscina may hold the task briefly while it starts a thread, so take the buffers now as promised.
    if (this.#piscina.idleThreads === 0 && call.inputOwnedByCaller) call.input = takeOwnership(call.input);
    let pending: Promise<CpuTaskOutput>;
    try {
      // No signal, ever: an abort would terminate the thread. Transfer, not clone.
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
        // Counted apart from deadline withdrawals, so the rule's effect can be seen.
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

  threadIds(): number[] {
    return this.#piscina.threads.map((w) => w.threadId);
  }

  /** Stops the pool: queued calls fail, running tasks finish (up to 10 s), threads exit. Idempotent. */
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
