/**
 * The pool client on real threads (compiled workers: `npm run build` first): transfer, deadlines without
 * killing threads, failures confined to one call, and the bounded queue (contract.md §10).
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { PoolSettings } from '../../src/config/settings.js';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import { type CpuCandidate, type CpuTaskInput, runCpuTask } from '../../src/cpu-stage/cpu-task.js';
import { CpuPool } from '../../src/pool/pool-client.js';
import { WITHDRAW_LEAD_MS } from '../../src/pool/pool-types.js';
import { projectRoot } from '../../src/pool/worker-file.js';
import { monotonicNow } from '../../src/util/clock.js';
import { type IbexError, isIbexError } from '../../src/wire/errors.js';
import type { Fault } from '../fixtures/faulty-cpu-worker.js';

const FAULTY = path.join(projectRoot(), 'dist', 'test', 'fixtures', 'faulty-cpu-worker.js');
const SETTINGS: PoolSettings = {
  minThreads: 2,
  maxThreads: 2,
  maxQueue: 2,
  idleTimeoutMs: 60_000,
  maxOldGenerationMb: 128,
};

/** A typical assembly: n memories of ~100 tokens. */
function typical(n = 30, deadlineInMs = 60_000): CpuTaskInput {
  const candidates: CpuCandidate[] = Array.from({ length: n }, (_, i) => ({
    memory_id: `mem-${String(i).padStart(3, '0')}`,
    category: ['factual', 'procedural', 'episodic', 'ops'][i % 4]!,
    content: `Memory ${i}: ${'the quick brown fox & the <lazy> dog '.repeat(10)}`,
    score: 0.3 + ((i * 17) % 70) / 100,
    similarity: 0.5,
    confidence: 0.5,
    rank: i + 1,
    tokens: 100 + (i % 9),
  }));
  return encodeCandidates(candidates, {
    budget: 1500,
    dpCellCeiling: 437_570,
    maxConsecutiveSkips: 5,
    nonce: 'test-nonce',
    directive: 'Answer briefly.',
    recentMessages: [{ role: 'user', content: 'what do you remember?' }],
    toolSchemas: [],
    deadline: monotonicNow() + deadlineInMs,
  });
}

/**
 * The pathological table: ceiling raised to 10M cells, n=200, budget 100000 (200 × 6251 cells).
 * Costs far above the budget in total keep every row's whole band live. The contents are markup-dense
 * (1.2 MB, 900 k characters to escape), so formatting them all would take tens of ms: the worker's reserve
 * for the formatter (it cannot know the selection before packing) then exceeds the whole 25 ms window
 * below, which makes the cut independent of machine speed, while the 2–3 memories actually selected
 * format in a few ms and leave the answer ample slack before the deadline on a loaded machine.
 */
function pathological(deadline: number): CpuTaskInput {
  const candidates: CpuCandidate[] = Array.from({ length: 200 }, (_, i) => ({
    memory_id: `p-${String(i).padStart(3, '0')}`,
    category: 'factual',
    content: `pathological ${i} ${'<&>x'.repeat(1500)}`,
    score: ((i * 7919) % 1000) / 1000,
    similarity: 0.5,
    confidence: 0.5,
    rank: i + 1,
    tokens: 25_000 + ((i * 104_729) % 25_000),
  }));
  return encodeCandidates(candidates, {
    budget: 100_000,
    dpCellCeiling: 10_000_000,
    maxConsecutiveSkips: 5,
    nonce: 'n',
    directive: null,
    recentMessages: [],
    toolSchemas: [],
    deadline,
  });
}

function withFault(input: CpuTaskInput, fault: Fault): CpuTaskInput {
  return Object.assign(input, fault);
}

/** Settles `p`, returning the rejection (or failing when it resolves) and when it settled. */
async function rejection(p: Promise<unknown>): Promise<{ err: IbexError; at: number }> {
  try {
    await p;
  } catch (err) {
    return { err: err as IbexError, at: monotonicNow() };
  }
  throw new Error('expected a rejection');
}

/** {@link rejection} of `pool.run(input)`, with how many of `pool`'s tasks were running when it came. */
async function runRejection(
  pool: CpuPool,
  input: CpuTaskInput,
): Promise<{ err: IbexError; at: number; running: number }> {
  let running = -1;
  const { err, at } = await rejection(
    pool.run(input).catch((e: unknown) => {
      running = pool.stats().running;
      throw e;
    }),
  );
  return { err, at, running };
}

const sameMembers = (a: number[], b: number[]) => expect([...a].sort()).toEqual([...b].sort());

describe('CpuPool on the real worker', () => {
  let pool: CpuPool;
  beforeAll(async () => {
    pool = await CpuPool.start(SETTINGS);
  });
  afterAll(async () => {
    await pool?.close();
  });

  it('starts with every minimum thread warm and counters at zero', () => {
    expect(pool.threadIds()).toHaveLength(2);
    const s = pool.stats();
    expect(s.threads).toBe(2);
    expect(s.completed + s.withdrawn + s.rejected + s.failed + s.abandoned + s.unfit).toBe(0);
    expect(s.queueSize).toBe(0);
  });

  it('transfers the batch: its buffers are detached in the sender once dispatched, and the answer is right', async () => {
    const input = typical();
    const views = [
      input.score,
      input.similarity,
      input.confidence,
      input.rank,
      input.tokens,
      input.text,
      input.offsets,
    ];
    expect(views.every((v) => v.byteLength > 0)).toBe(true);
    const expected = runCpuTask(typical());
    const pending = pool.run(input);
    // Synchronously after run(): a free thread took the task and the postMessage moved the buffer.
    expect(views.map((v) => v.byteLength)).toEqual([0, 0, 0, 0, 0, 0, 0]);
    expect(input.score.buffer.byteLength).toBe(0);
    const r = await pending;
    expect(r.output.selected).toBeInstanceOf(Int32Array);
    expect(Array.from(r.output.selected)).toEqual(Array.from(expected.selected));
    expect(r.output.assembled_context).toBe(expected.assembled_context);
    expect(r.output.pack.path).toBe('dp');
    expect(pool.threadIds()).toContain(r.output.thread_id);
    expect(r.run_us).toBe(r.output.run_us);
    expect(r.round_trip_us).toBeGreaterThanOrEqual(r.wait_us);
    expect(r.round_trip_us).toBeGreaterThan(0);
  });

  it('serves a task without a deadline (no timer armed)', async () => {
    const input = typical();
    input.deadline = Number.POSITIVE_INFINITY;
    const r = await pool.run(input);
    expect(r.output.pack.path).toBe('dp');
    expect(r.output.memories_included).toBeGreaterThan(0);
  });

  it('returns a pathological table on the greedy path by its deadline, and kills no thread', async () => {
    const before = pool.threadIds();
    // Far deadline first: the same table really runs (path dp), so the deadline below is what cuts it.
    const full = await pool.run(pathological(monotonicNow() + 60_000));
    expect(full.output.pack.path).toBe('dp');
    expect(full.output.pack.cells).toBe(200 * 6251);

    // Half the measured full run: the DP must be cut by the deadline however fast or loaded the machine is.
    const input = pathological(0);
    input.deadline = monotonicNow() + Math.max(5, full.output.run_us / 2000);
    const r = await pool.run(input).catch((err: unknown) => err as IbexError);
    if (r instanceof Error) {
      // A machine too loaded for the return trip: the pool answered at the deadline, the thread finished.
      expect(isIbexError(r, 'IBEX_ERR_POOL_DEADLINE')).toBe(true);
    } else {
      expect(r.output.pack.path).toBe('greedy');
      expect(r.output.pack.greedy_reason).toBe('deadline');
      expect(r.output.pack.cells).toBe(200 * 6251);
      expect(r.output.pack.total_tokens).toBeLessThanOrEqual(100_000);
      expect(r.output.memories_included).toBeGreaterThan(0);
      expect(pool.stats().abandoned).toBe(0);
    }
    expect(pool.threadIds()).toEqual(before);
  });
});

describe('CpuPool with the fault-injecting worker', () => {
  let pool: CpuPool;
  const errors: Error[] = [];
  beforeAll(async () => {
    pool = await CpuPool.start(SETTINGS, { filename: FAULTY, onError: (e) => errors.push(e) });
  });
  afterAll(async () => {
    await pool?.close();
  });

  it('withdraws a task queued behind long tasks at its deadline; the long tasks finish on their threads', async () => {
    const ids = pool.threadIds();
    const t0 = monotonicNow();
    const long = [1, 2].map(() => pool.run(withFault(typical(), { fault: 'sleep', sleepMs: 300 })));
    const queued = typical(30, 40);
    const deadline = queued.deadline;
    const { err, at, running: runningAtWithdrawal } = await runRejection(pool, queued);
    expect(isIbexError(err, 'IBEX_ERR_POOL_DEADLINE')).toBe(true);
    // Withdrawn by the deadline — never before it (the pool re-checks the clock) — and not when a thread
    // freed up: both long tasks were still running. (Upper real-clock bounds flake on a loaded machine.)
    expect(at).toBeGreaterThanOrEqual(deadline - WITHDRAW_LEAD_MS);
    expect(at).toBeGreaterThan(t0);
    expect(runningAtWithdrawal).toBe(2);
    // Withdrawn while queued: ownership had passed, so the caller's arrays are detached, yet nothing ran it.
    expect(queued.text.byteLength).toBe(0);
    expect(pool.stats().withdrawn).toBe(1);
    for (const r of await Promise.all(long)) {
      expect(r.output.pack.path).toBe('dp');
      expect(r.round_trip_us).toBeGreaterThanOrEqual(250_000);
    }
    expect(pool.threadIds()).toEqual(ids);
    expect(pool.stats().completed).toBe(2);
    // Both threads busy for ~300 ms of a 5 s average: 1 − e^(−0.3/5) ≈ 0.06.
    expect(pool.stats().utilization).toBeGreaterThan(0.03);
    expect(pool.stats().utilization).toBeLessThan(1);
  });

  it("withdraws a queued task when the caller's signal aborts, with the signal's reason as cause", async () => {
    const long = [1, 2].map(() => pool.run(withFault(typical(), { fault: 'sleep', sleepMs: 100 })));
    const controller = new AbortController();
    const pending = pool.run(typical(), { signal: controller.signal });
    const reason = new DOMException('call cancelled', 'AbortError');
    controller.abort(reason);
    const { err } = await rejection(pending);
    expect(err.code).toBe('IBEX_ERR_POOL_DEADLINE');
    expect(err.cause).toBe(reason);
    await Promise.all(long);
  });

  it('answers a task still running at its deadline with POOL_DEADLINE at the deadline, and leaves its thread alone', async () => {
    const ids = pool.threadIds();
    const abandonedBefore = pool.stats().abandoned;
    const input = withFault(typical(30, 30), { fault: 'sleep', sleepMs: 200 });
    const deadline = input.deadline;
    const { err, at, running: runningAtAnswer } = await runRejection(pool, input);
    expect(err.code).toBe('IBEX_ERR_POOL_DEADLINE');
    // At the deadline, never before it; "not when the task ended" is the task still running then.
    expect(at).toBeGreaterThanOrEqual(deadline - 0.5);
    expect(runningAtAnswer).toBe(1);
    expect(pool.stats().abandoned).toBe(abandonedBefore + 1);
    // The thread finishes the task undisturbed; then the same two threads serve the next calls.
    await vi.waitFor(() => expect(pool.stats().running).toBe(0), { timeout: 5_000, interval: 10 });
    const next = await Promise.all([pool.run(typical()), pool.run(typical())]);
    sameMembers(
      next.map((r) => r.output.thread_id),
      ids,
    );
    expect(pool.threadIds()).toEqual(ids);
  });

  it('takes a result already waiting when a stalled loop reaches the deadline: not abandoned', async () => {
    const abandonedBefore = pool.stats().abandoned;
    const input = withFault(typical(30, 40), { fault: 'sleep', sleepMs: 5 });
    const run = pool.run(input);
    // The thread answers ~5 ms in; the event loop is blocked until long past the 40 ms deadline (a GC
    // pause, another call's turn). Node fires due timers before it reads ports: deciding at the timer would
    // abandon a result that came in time.
    const until = input.deadline + 400;
    while (monotonicNow() < until) {
      // busy
    }
    const r = await run;
    expect(r.output.invalid).toBeNull();
    expect(Array.from(r.output.selected)).toEqual(Array.from(runCpuTask(typical()).selected));
    expect(pool.stats().abandoned).toBe(abandonedBefore);
  });

  it('waits for a dispatched task until resultDeadline when the caller gives one (its request buffer went along)', async () => {
    const input = withFault(typical(30, 30), { fault: 'sleep', sleepMs: 120 });
    const started = monotonicNow();
    const r = await pool.run(input, { resultDeadline: started + 5_000 });
    // Answered after its own deadline (30 ms), by the task itself: not abandoned.
    expect(monotonicNow() - started).toBeGreaterThanOrEqual(100);
    expect(r.output.invalid).toBeNull();
  });

  it('asks fitsAt when a queued task reaches a free thread: false withdraws it and hands its batch back, true dispatches it', async () => {
    const withdrawnBefore = pool.stats().withdrawn;
    const unfitBefore = pool.stats().unfit;
    const completedBefore = pool.stats().completed;
    const t0 = monotonicNow();
    const long = [1, 2].map(() => pool.run(withFault(typical(), { fault: 'sleep', sleepMs: 80 })));
    const asked: { call: string; now: number }[] = [];
    const returned: CpuTaskInput[] = [];
    const refused = pool.run(typical(), {
      fitsAt: (now) => {
        asked.push({ call: 'refused', now });
        return false;
      },
      onReturned: (back) => returned.push(back),
    });
    const accepted = pool.run(typical(), {
      fitsAt: (now) => {
        asked.push({ call: 'accepted', now });
        return true;
      },
    });
    const { err } = await rejection(refused);
    expect(err.code).toBe('IBEX_ERR_POOL_DEADLINE');
    expect(err.poolReason).toBe('withdrawn');
    // Asked once a long task freed its thread, not at run(): the queue wait is in `now`.
    expect(asked[0]!.call).toBe('refused');
    expect(asked[0]!.now - t0).toBeGreaterThanOrEqual(70);
    // The batch comes back whole: the degraded answer is built from it.
    expect(returned).toHaveLength(1);
    expect(returned[0]!.text.byteLength).toBe(typical().text.byteLength);
    const ok = await accepted;
    expect(Array.from(ok.output.selected)).toEqual(Array.from(runCpuTask(typical()).selected));
    expect(asked.map((a) => a.call)).toEqual(['refused', 'accepted']);
    await Promise.all(long);
    // Counted `unfit`, apart from deadline withdrawals.
    expect(pool.stats().unfit).toBe(unfitBefore + 1);
    expect(pool.stats().withdrawn).toBe(withdrawnBefore);
    expect(pool.stats().completed).toBe(completedBefore + 3);
  });

  it('dispatches a queued task whose fitsAt throws, as if it fitted: the call is never left unsettled', async () => {
    const long = [1, 2].map(() => pool.run(withFault(typical(), { fault: 'sleep', sleepMs: 50 })));
    const r = await pool.run(typical(), {
      fitsAt: () => {
        throw new Error('broken check');
      },
    });
    expect(Array.from(r.output.selected)).toEqual(Array.from(runCpuTask(typical()).selected));
    await Promise.all(long);
  });

  it('does not ask fitsAt of a task dispatched by run() itself', async () => {
    let asked = 0;
    const r = await pool.run(typical(), {
      fitsAt: () => {
        asked++;
        return false;
      },
    });
    expect(r.output.invalid).toBeNull();
    expect(asked).toBe(0);
  });

  it('fails only the call whose task throws; the thread stays and the next call works', async () => {
    const ids = pool.threadIds();
    const failedBefore = pool.stats().failed;
    const [thrown, fine] = await Promise.allSettled([
      pool.run(withFault(typical(), { fault: 'throw' })),
      pool.run(typical()),
    ]);
    expect(thrown.status).toBe('rejected');
    const err = (thrown as PromiseRejectedResult).reason as IbexError;
    expect(err.code).toBe('IBEX_ERR_POOL_TASK_FAILED');
    expect((err.cause as Error).message).toBe('fixture: the task threw');
    expect(fine.status).toBe('fulfilled');
    expect(pool.stats().failed).toBe(failedBefore + 1);
    const next = await pool.run(typical());
    expect(next.output.memories_included).toBeGreaterThan(0);
    expect(pool.threadIds()).toEqual(ids);
  });

  it('fails only the call whose thread exits; the pool replaces the thread and keeps serving', async () => {
    const ids = pool.threadIds();
    const [exited, fine] = await Promise.allSettled([
      pool.run(withFault(typical(), { fault: 'exit' })),
      pool.run(withFault(typical(), { fault: 'sleep', sleepMs: 20 })),
    ]);
    expect(exited.status).toBe('rejected');
    const err = (exited as PromiseRejectedResult).reason as IbexError;
    expect(err.code).toBe('IBEX_ERR_POOL_TASK_FAILED');
    expect(String((err.cause as Error).message)).toContain('exited with code: 7');
    expect(fine.status).toBe('fulfilled');
    // The replacement thread may still be starting: both batches are taken at run() all the same.
    const inputs = [typical(), typical()];
    const pending = inputs.map((input) => pool.run(input));
    for (const input of inputs) expect(input.text.byteLength).toBe(0);
    const next = await Promise.all(pending);
    expect(next.every((r) => r.output.memories_included > 0)).toBe(true);
    const now = pool.threadIds();
    expect(now).toHaveLength(2);
    // Exactly one thread was replaced: the one that exited.
    expect(now.filter((id) => ids.includes(id))).toHaveLength(1);
    expect(errors).toEqual([]);
  });

  it('rejects at once when the queue is full, leaving the batch untouched and the queue as it was', async () => {
    const long = [1, 2].map(() => pool.run(withFault(typical(), { fault: 'sleep', sleepMs: 150 })));
    const queued = [1, 2].map(() => pool.run(typical()));
    expect(pool.stats().queueSize).toBe(2);
    const rejectedBefore = pool.stats().rejected;
    for (let i = 0; i < 5; i++) {
      const input = typical();
      const pending = pool.run(input);
      // "At once" without a clock: settled before any timer or I/O callback could run.
      const state = await Promise.race([
        pending.then(
          () => 'resolved',
          () => 'rejected',
        ),
        new Promise((r) => setImmediate(() => r('pending'))),
      ]);
      expect(state).toBe('rejected');
      const { err } = await rejection(pending);
      expect(err.code).toBe('IBEX_ERR_POOL_SATURATED');
      // Refused before any transfer: the caller still owns its arrays.
      expect(input.text.byteLength).toBeGreaterThan(0);
    }
    expect(pool.stats().rejected).toBe(rejectedBefore + 5);
    expect(pool.stats().queueSize).toBe(2);
    for (const r of await Promise.all([...long, ...queued]))
      expect(r.output.memories_included).toBeGreaterThan(0);
    const s = pool.stats();
    expect(s.queueSize).toBe(0);
    expect(s.running).toBe(0);
    expect(s.waitUs.count).toBe(s.completed);
    expect(s.runUs.count).toBeGreaterThanOrEqual(s.completed);
    expect(s.waitUs.max).toBeGreaterThan(100_000); // the queued ones waited behind 150 ms sleepers
  });

  it('takes the batch at run() even when the free slot has no thread yet (above minThreads)', async () => {
    const lazy = await CpuPool.start({ ...SETTINGS, minThreads: 0, maxThreads: 1, idleTimeoutMs: 20 });
    try {
      // The warm-up thread idles out; the next task has to wait for piscina to start a new one.
      await vi.waitFor(() => expect(lazy.threadIds()).toEqual([]), { timeout: 5_000, interval: 10 });
      const input = typical();
      const pending = lazy.run(input);
      expect(input.text.byteLength).toBe(0);
      const r = await pending;
      expect(Array.from(r.output.selected)).toEqual(Array.from(runCpuTask(typical()).selected));
      expect(r.output.thread_id).toBe(lazy.threadIds()[0]);
    } finally {
      await lazy.close();
    }
  });

  it('fails start-up fast, with POOL_TASK_FAILED, when the worker module cannot load', async () => {
    const t0 = performance.now();
    const { err } = await rejection(
      CpuPool.start(SETTINGS, {
        filename: path.join(projectRoot(), 'dist', 'no-such-worker.js'),
        onError: () => {},
      }),
    );
    expect(err.code).toBe('IBEX_ERR_POOL_TASK_FAILED');
    expect(err.message).toContain('no-such-worker.js');
    expect(performance.now() - t0).toBeLessThan(10_000);
  });

  it('fails calls after close()', async () => {
    const extra = await CpuPool.start({ ...SETTINGS, minThreads: 1, maxThreads: 1 }, { filename: FAULTY });
    await extra.close();
    const { err } = await rejection(extra.run(typical()));
    expect(err.code).toBe('IBEX_ERR_POOL_TASK_FAILED');
  });
});
