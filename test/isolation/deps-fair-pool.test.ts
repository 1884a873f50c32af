/**
 * Issue 9 item 3 on real threads (compiled workers: `npm run build` first): a flooding org's heavy calls
 * wait behind each other, not in front of another org's call, and a full queue refuses the flooding org's
 * newest call rather than the quiet org's. Assertions are on order and outcomes, never on durations.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PoolSettings } from '../../src/config/settings.js';
import { isIbexError } from '../../src/errors.js';
import { type CpuTaskInput, encodeCandidates } from '../../src/pool/cpu-task.js';
import { CpuPool } from '../../src/pool/pool-client.js';
import { projectRoot } from '../../src/pool/worker-file.js';
import { monotonicNow } from '../../src/util/clock.js';
import type { Fault } from '../fixtures/faulty-cpu-worker.js';

const FAULTY = path.join(projectRoot(), 'dist', 'test', 'fixtures', 'faulty-cpu-worker.js');
const NOISY = 'aaaaaaaa-0000-4000-8000-000000000001';
const QUIET = 'bbbbbbbb-0000-4000-8000-000000000002';

/** One small task; `sleepMs` makes it hold its thread like a heavy DP would. */
function task(sleepMs?: number): CpuTaskInput {
  const input = encodeCandidates(
    [
      {
        memory_id: 'm-1',
        category: 'factual',
        content: 'the quiet tenant remembers this',
        score: 0.9,
        similarity: 0.9,
        confidence: 0.9,
        rank: 1,
        tokens: 20,
      },
    ],
    {
      budget: 500,
      dpCellCeiling: 437_570,
      maxConsecutiveSkips: 5,
      nonce: 'n',
      directive: null,
      recentMessages: [],
      toolSchemas: [],
      // Generous: ordering, not speed, is under test (the suite runs on loaded machines).
      deadline: monotonicNow() + 30_000,
    },
  );
  return sleepMs === undefined ? input : Object.assign(input, { fault: 'sleep', sleepMs } satisfies Fault);
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
    const done: string[] = [];
    const track = (name: string, p: Promise<unknown>) =>
      p.then(
        () => done.push(name),
        (err: unknown) => done.push(`${name}:${(err as { code?: string }).code}`),
      );
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
