/**
 * The fair pool queue on real threads (compiled workers: `npm run build` first): a flooding org's heavy calls
 * wait behind each other, not in front of another org's call, and a full queue refuses the flooding org's
 * newest call rather than the quiet org's. Assertions are on order and outcomes, never on durations.
 */

import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { taskScalars } from '../../bench/lib/synthetic.js';
import type { PoolSettings } from '../../src/config/settings.js';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import type { CpuTaskInput, CpuTaskScalars } from '../../src/cpu-stage/cpu-task.js';
import { CpuPool } from '../../src/pool/pool-client.js';
import { projectRoot } from '../../src/pool/worker-file.js';
import { monotonicNow } from '../../src/util/clock.js';
import { isIbexError } from '../../src/wire/errors.js';
import type { Fault } from '../fixtures/faulty-cpu-worker.js';

const FAULTY = path.join(projectRoot(), 'dist', 'test', 'fixtures', 'faulty-cpu-worker.js');
const NOISY = 'aaaaaaaa-0000-4000-8000-000000000001';
const QUIET = 'bbbbbbbb-0000-4000-8000-000000000002';

/** A task's scalars: a 500-token budget, nothing but the candidates and history it is given. */
function scalars(): CpuTaskScalars {
  // Generous deadline: ordering, not speed, is under test (the suite runs on loaded machines).
  return taskScalars({ budget: 500, deadline: monotonicNow() + 30_000 });
}

/**
 * One task with one memory; `sleepMs` makes it hold its thread like a heavy DP would, and `content` sets its
 * text (a pool's large-task size counts it).
 */
function task(sleepMs?: number, content = 'the quiet tenant remembers this'): CpuTaskInput {
  const input = encodeCandidates(
    [
      {
        memory_id: 'm-1',
        category: 'factual',
        content,
        score: 0.9,
        similarity: 0.9,
        confidence: 0.9,
        rank: 1,
        tokens: 20,
      },
    ],
    scalars(),
  );
  return sleepMs === undefined ? input : Object.assign(input, { fault: 'sleep', sleepMs } satisfies Fault);
}

/** Completion order of tracked calls: `name`, or `name:CODE` for a rejected one. */
function tracker() {
  const done: string[] = [];
  const track = (name: string, p: Promise<unknown>) =>
    p.then(
      () => done.push(name),
      (err: unknown) => done.push(`${name}:${(err as { code?: string }).code}`),
    );
  return { done, track };
}

describe('CpuPool fairness across orgs (real pool, one thread)', () => {
  let pool: CpuPool;
  const settings: PoolSettings = {
    minThreads: 1,
    maxThreads: 1,
    maxQueue: 4,
    idleTimeoutMs: 60_000,
    maxOldGenerationMb: 128,
  };
  beforeAll(async () => {
    pool = await CpuPool.start(settings, { filename: FAULTY });
  });
  afterAll(async () => {
    await pool?.close();
  });

  it('serves a quiet org after at most one more heavy call of a flooding org, not after all of them', async () => {
    const { done, track } = tracker();
    // One running + three queued heavy calls of the noisy org, then one call of the quiet org.
    const noisy = [0, 1, 2, 3].map((i) => track(`noisy-${i}`, pool.run(task(60), { orgId: NOISY })));
    const quiet = track('quiet', pool.run(task(), { orgId: QUIET }));
    await Promise.all([...noisy, quiet]);
    // FIFO would put the quiet call last; round-robin puts it right after the running call's successor
    // at worst (the queue was noisy-1..3 when it arrived: it is served second).
    expect(done).toEqual(['noisy-0', 'noisy-1', 'quiet', 'noisy-2', 'noisy-3']);
    expect(pool.stats().completed).toBe(5);
  });

  it("refuses the flooding org's newest queued call, not the quiet org's, when the queue is full", async () => {
    const before = pool.stats();
    const running = pool.run(task(60), { orgId: NOISY });
    const queued = [0, 1, 2, 3].map(() => pool.run(task(10), { orgId: NOISY }));
    const settled = queued.map((p) =>
      p.then(
        () => 'ok',
        (err: unknown) => err,
      ),
    );
    // The queue holds maxQueue = 4 noisy calls: the quiet call takes the newest one's place.
    const quiet = await pool.run(task(), { orgId: QUIET });
    expect(quiet.output.memories_included).toBe(1);
    const outcomes = await Promise.all(settled);
    expect(outcomes.slice(0, 3)).toEqual(['ok', 'ok', 'ok']);
    expect(isIbexError(outcomes[3], 'IBEX_ERR_POOL_SATURATED')).toBe(true);
    await running;
    const after = pool.stats();
    expect(after.rejected - before.rejected).toBe(1);
    expect(after.completed - before.completed).toBe(5);
  });

  it('refuses a call outright when the queue is full and no org has two more waiting than its own', async () => {
    const running = pool.run(task(60), { orgId: NOISY });
    const others = ['c', 'd', 'e', 'f'].map((org) => pool.run(task(), { orgId: org }));
    const err = await pool.run(task(), { orgId: QUIET }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isIbexError(err, 'IBEX_ERR_POOL_SATURATED')).toBe(true);
    await Promise.all([running, ...others]);
  });
});

describe('CpuPool large tasks (real pool, two threads)', () => {
  const LARGE = 64 * 1024;
  const base: PoolSettings = {
    minThreads: 2,
    maxThreads: 2,
    maxQueue: 8,
    idleTimeoutMs: 60_000,
    maxOldGenerationMb: 128,
  };
  const pools: CpuPool[] = [];
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.close()));
  });
  const start = async (largeTaskBytes: number) => {
    const pool = await CpuPool.start({ ...base, largeTaskBytes }, { filename: FAULTY });
    pools.push(pool);
    return pool;
  };
  it("keeps a thread for small tasks while one org's large tasks wait for the other one", async () => {
    const pool = await start(LARGE);
    const { done, track } = tracker();
    const noisy = [0, 1, 2].map((i) =>
      track(`noisy-${i}`, pool.run(task(300, 'x'.repeat(LARGE)), { orgId: NOISY })),
    );
    // Only one large task runs; the others wait although a thread is free.
    expect(pool.stats()).toMatchObject({ running: 1, largeRunning: 1, queueSize: 2 });
    // A small task of another org takes the free thread at once, and so does a small one of the same org.
    const quiet = track('quiet', pool.run(task(), { orgId: QUIET }));
    expect(pool.stats()).toMatchObject({ running: 2, largeRunning: 1, queueSize: 2 });
    await quiet;
    const ownSmall = track('noisy-small', pool.run(task(), { orgId: NOISY }));
    expect(pool.stats()).toMatchObject({ running: 2, largeRunning: 1 });
    await Promise.all([...noisy, ownSmall]);
    // The small tasks finished while the first large one still held its thread (it sleeps 300 ms).
    expect(done).toEqual(['quiet', 'noisy-small', 'noisy-0', 'noisy-1', 'noisy-2']);
    expect(pool.stats()).toMatchObject({ running: 0, largeRunning: 0, queueSize: 0, completed: 5 });
  });

  it('runs as many large tasks as threads when largeTaskBytes is 0, and a small task then waits', async () => {
    const pool = await start(0);
    const { done, track } = tracker();
    const noisy = [100, 400].map((ms, i) =>
      track(`noisy-${i}`, pool.run(task(ms, 'x'.repeat(LARGE)), { orgId: NOISY })),
    );
    expect(pool.stats()).toMatchObject({ running: 2, largeRunning: 0, queueSize: 0 });
    const quiet = track('quiet', pool.run(task(), { orgId: QUIET }));
    expect(pool.stats().queueSize).toBe(1);
    await Promise.all([...noisy, quiet]);
    // The small task had to wait for the first large one to end.
    expect(done).toEqual(['noisy-0', 'quiet', 'noisy-1']);
  });

  it('counts history bytes too, and a small task below the size is never held back', async () => {
    const pool = await start(LARGE);
    // One user message of LARGE bytes, as the service sends history: bytes and spans.
    const source = new TextEncoder().encode(`user${'h'.repeat(LARGE)}`);
    const history = encodeCandidates([], scalars(), {
      source,
      spans: Uint32Array.of(0, 4, 4, 4 + LARGE),
      count: 1,
      contentPending: false,
    });
    expect(history.history.byteLength).toBe(LARGE + 4);
    const first = pool.run(Object.assign(history, { fault: 'sleep', sleepMs: 100 } satisfies Fault));
    const second = pool.run(task(100, 'x'.repeat(LARGE - 1024)));
    // The history-only task is large; the other, just under the size, takes the second thread.
    expect(pool.stats()).toMatchObject({ running: 2, largeRunning: 1, queueSize: 0 });
    await Promise.all([first, second]);
  });
});
