/**
 * The answer guarantee (contract.md §10) over real gRPC on loopback: a call the pool or a slow memory
 * service cannot serve in time gets the degraded answer (L2) by its deadline, never DEADLINE_EXCEEDED,
 * unless no answer can be built before D; a small caller of another org stays OK meanwhile.
 */
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimateTokens } from '../../src/text/estimate.js';
import { FAULT_PREFIX, startMemoryRouter, startPoolFaultService } from '../faults/helpers.js';
import { startMemoryFixture } from '../helpers/memory-fixture.js';
import { withQuietCaller } from '../helpers/quiet-caller.js';
import { memories, memoryService, request, startTestService, type TestService, tenant } from './harness.js';

describe('answer guarantee (contract.md §10)', () => {
  it('a burst on a one-thread pool is answered OK (L2 or better), never DEADLINE_EXCEEDED', async () => {
    const heavy = tenant();
    const quiet = tenant();
    // Each heavy task holds the only thread for 250 ms (the fixture worker blocks it like a long DP), so
    // most of a burst of 12 cannot run before its 2 s deadline: those must get the L2 answer in time.
    const svc = await startPoolFaultService({
      IBEX_CONTEXT_TIMEOUT: '10000',
      IBEX_CONTEXT_POOL_MIN_THREADS: '1',
      IBEX_CONTEXT_POOL_MAX_THREADS: '1',
    });
    try {
      const sleeper = { role: 'user', content: `${FAULT_PREFIX}sleep:250` };
      const burst = await withQuietCaller(
        svc.client,
        () => request(quiet),
        () =>
          Promise.all(
            Array.from({ length: 12 }, () =>
              svc.client.assemble(request(heavy, { recent_messages: [sleeper] }), { deadlineMs: 2_000 }),
            ),
          ),
        1,
        15_000,
      );
      const levels = burst.map((out) => {
        expect(out.status.code, out.status.details).toBe(status.OK);
        return out.response!.degradation.level;
      });
      expect(levels).toContain('L2');
      for (const out of burst.filter((o) => o.response!.degradation.level === 'L2'))
        expect(out.response!.degradation.reasons).toContain('pool_deadline');
    } finally {
      await svc.stop();
    }
  });

  it('a memory service answering in 300 ms with a 2 s caller deadline gets OK L2, not DEADLINE_EXCEEDED', async () => {
    const slow = tenant();
    const quiet = tenant();
    // One memory service URL: the slow agent's calls go to a server answering after 300 ms, the quiet
    // agent's to one without added latency.
    const fast = await startMemoryFixture(memories(quiet.org, quiet.agent, 3), { token: 'test-token' });
    const late = await startMemoryFixture(memories(slow.org, slow.agent, 3), {
      token: 'test-token',
      latencyMs: 300,
    });
    const router = await startMemoryRouter(fast.memory.url);
    router.fault(slow.agent, { upstream: late.memory.url });
    // Branch timeouts and wall well under the slow service's 300 ms (production has 15/45/40 ms; a shared
    // machine needs room for the quiet caller's L0); the caller's deadline is what allows 2 s.
    const svc = await startTestService({
      ...memoryService(router.url, 'test-token'),
      IBEX_CONTEXT_DEADLINE_MS: '150',
      IBEX_CONTEXT_HOT_TIMEOUT_MS: '120',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '150',
    });
    try {
      const out = await withQuietCaller(
        svc.client,
        () => request(quiet),
        () => svc.client.assemble(request(slow), { deadlineMs: 2_000 }),
        3,
        10_000,
      );
      expect(out.status.code).toBe(status.OK);
      expect(out.response!.degradation.level).toBe('L2');
      expect(out.response!.assembled_context).toContain('user: Do you remember the lake?');
    } finally {
      await svc.stop();
      await Promise.all([router.close(), fast.close(), late.close()]);
    }
  });
});

describe('a history no answer can be built for before D (contract.md §10)', () => {
  let svc: TestService;
  const quiet = tenant();
  const heavy = tenant();

  beforeAll(async () => {
    // D = arrival + 15 ms on the server's own clock, whatever the transfer took: the 9.4 MiB history
    // below needs ~19 ms of degraded answer at the prior per-MiB cost (nothing learnt yet).
    svc = await startTestService({ IBEX_CONTEXT_TIMEOUT: '15', IBEX_CONTEXT_DEADLINE_MS: '10' });
    svc.store.upsertMemories(memories(quiet.org, quiet.agent, 3));
    svc.store.upsertMemories(memories(heavy.org, heavy.agent, 3));
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('is answered DEADLINE_EXCEEDED at once: no pool task, no main-thread pass over its history; the process keeps serving', async () => {
    const content = '漢'.repeat(32_768);
    const recent = Array.from({ length: 100 }, () => ({ role: 'user', content }));
    const before = svc.service.pool.stats();
    const out = await svc.client.assemble(request(heavy, { recent_messages: recent }), {
      deadlineMs: 10_000,
    });
    expect(out.status.code, out.status.details).toBe(status.DEADLINE_EXCEEDED);
    const after = svc.service.pool.stats();
    const tasks = (s: typeof before) => s.completed + s.withdrawn + s.abandoned + s.rejected + s.failed;
    expect(tasks(after) - tasks(before)).toBe(0);
    // The process keeps serving (a small call's own 15 ms D is this machine's to miss, not the point here).
    const health = await svc.client.healthCheck('', { deadlineMs: 10_000 });
    expect(health.response?.status).toBe('SERVING');
  });
});

describe('a 9 MiB history whose CPU stage is missed (contract.md §10)', () => {
  const cjk = '漢'.repeat(32_768);

  it('queued and withdrawn: its request buffer comes back and the L2 answer is built on its bytes', async () => {
    // One thread, held 3 s by the first call's task: the CJK call's task (its request buffer transferred
    // to the pool) waits in the queue until its deadline withdraws it and hands the buffer back. D is
    // 1.5 s after arrival, not 400 ms: with other test files running, the call was once answered
    // DEADLINE_EXCEEDED at 400 ms (its 9.8 MB upload and degraded answer most likely did not fit), which is
    // right for a call whose bytes arrive too late but not what this test is about.
    const svc = await startPoolFaultService({
      IBEX_CONTEXT_TIMEOUT: '1500',
      IBEX_CONTEXT_POOL_MIN_THREADS: '1',
      IBEX_CONTEXT_POOL_MAX_THREADS: '1',
    });
    try {
      const t = tenant();
      const recent = Array.from({ length: 100 }, () => ({ role: 'user', content: cjk }));
      const blocker = svc.client.assemble(
        request(t, { recent_messages: [{ role: 'user', content: `${FAULT_PREFIX}sleep:3000` }] }),
        { deadlineMs: 10_000 },
      );
      await new Promise((resolve) => setTimeout(resolve, 50));
      const before = svc.pool.stats();
      const out = await svc.client.assemble(request(t, { recent_messages: recent }), { deadlineMs: 15_000 });
      expect(out.status.code, out.status.details).toBe(status.OK);
      const res = out.response!;
      expect(res.degradation.level).toBe('L2');
      expect(res.degradation.reasons).toContain('pool_deadline');
      expect(svc.pool.stats().withdrawn - before.withdrawn).toBe(1);
      expect(res.history_tokens).toBe(Math.ceil((100 * (6 + 32_768) + 99) / 4));
      expect(res.tokens_used).toBe(estimateTokens(res.assembled_context, 'chars_div_4'));
      expect(res.assembled_context.split('\n').filter((l) => l === `user: ${cjk}`)).toHaveLength(100);
      await blocker;
    } finally {
      await svc.stop();
    }
  });

  it('abandoned while running: the task took the request buffer with it, so DEADLINE_EXCEEDED', async () => {
    // D = arrival + 1.5 s (room for the upload under load, as above); the task (held 3.5 s by the fixture
    // worker) was dispatched with the request's own buffer transferred (no 9 MiB copy on the main thread)
    // and is abandoned at its deadline: the history's bytes are in that thread until the task returns, so
    // no degraded answer can be built. Only a dispatched task that overruns its deadline does this; the DP
    // stops cooperatively before it.
    const svc = await startPoolFaultService({ IBEX_CONTEXT_TIMEOUT: '1500' });
    try {
      const t = tenant();
      const recent = [
        { role: 'user', content: `${FAULT_PREFIX}sleep:3500` },
        ...Array.from({ length: 99 }, () => ({ role: 'user', content: cjk })),
      ];
      const before = svc.pool.stats();
      const out = await svc.client.assemble(request(t, { recent_messages: recent }), { deadlineMs: 15_000 });
      expect(out.status.code, out.status.details).toBe(status.DEADLINE_EXCEEDED);
      expect(svc.pool.stats().abandoned - before.abandoned).toBe(1);
      // The process keeps serving.
      const small = await svc.client.assemble(request(t), { deadlineMs: 10_000 });
      expect(small.status.code, small.status.details).toBe(status.OK);
    } finally {
      await svc.stop();
    }
  });
});
