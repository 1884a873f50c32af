/**
 * Worker pool: a task that throws, a worker that exits, a worker over its memory limit,
 * a full queue. Each is answered L2 with directive + history and `pool_failed` / `pool_saturated`, a
 * concurrent call is answered in full, the next call is L0, and `ibex_context_pool_tasks_total{outcome}`
 * and `ibex_context_degraded_total{reason}` moved.
 *
 * Throw / exit / queue-full use the test-only fault worker (test/fixtures/faulty-cpu-worker.ts), which
 * the service cannot load through settings, so they run on the real pipeline wired by
 * `startPoolFaultService`; so does the memory limit (`heap`: the task allocates until its 16 MB heap ends
 * the thread), since memories far larger than that heap no longer exhaust it: the real worker escapes
 * their bytes into the answer's off-heap buffer, which the last block shows.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { CallOutcome } from '../../src/tools/client/context-client.js';
import type { AssembleContextResponse } from '../../src/wire/proto.js';
import { memories, request, startTestService, type TestService, tenant } from '../e2e/harness.js';
import { poolFaultSuite } from '../helpers/pool-fault-suite.js';
import { faultedRequest, moved, scrape } from './helpers.js';

const N = 5;
const DIRECTIVE = 'Pool fault directive.';

/** An OK answer at `level` for `reason` alone, all three branches successful; returns the response. */
function expectCpuStageLost(r: CallOutcome<AssembleContextResponse>, level: 'L1' | 'L2', reason: string) {
  expect(r.status.code, r.status.details).toBe(status.OK);
  const res = r.response!;
  expect(res.degradation.level).toBe(level);
  expect(res.degradation.reasons).toEqual([reason]);
  // Retrieval itself went fine: only the CPU stage failed.
  expect(res.degradation.branches.map((b) => b.status)).toEqual(['success', 'success', 'success']);
  return res;
}

/** The degraded answer of a failed CPU stage (contract.md §10): directive + history, no memories, L2. */
function expectPoolDegraded(r: CallOutcome<AssembleContextResponse>, reason: string) {
  const res = expectCpuStageLost(r, 'L2', reason);
  expect(res.memories_included).toBe(0);
  expect(res.memories_used.every((m) => m.exclusion === 'failed')).toBe(true);
  expect(res.assembled_context).not.toContain('about sailing');
  expect(res.assembled_context).toContain('user: Do you remember the lake?');
}

/**
 * A CPU stage lost for saturation or time (contract.md §10 degrade in steps): the main thread's answer
 * keeps the memories that fit (all N small ones here), L1 with the pool's reason.
 */
function expectSteppedDegraded(r: CallOutcome<AssembleContextResponse>, reason: string) {
  const res = expectCpuStageLost(r, 'L1', reason);
  expect(res.memories_included).toBe(N);
  expect(res.memories_used.map((m) => m.exclusion)).toEqual(Array(N).fill('included'));
  expect(res.memories_used.every((m) => m.token_estimate > 0)).toBe(true);
  expect(res.memory_tokens).toBe(res.memories_used.reduce((s, m) => s + m.token_estimate, 0));
  expect(res.assembled_context).toContain('about sailing');
  expect(res.assembled_context).toContain('user: Do you remember the lake?');
}

function expectFull(r: CallOutcome<AssembleContextResponse>, n = N) {
  expect(r.status.code, r.status.details).toBe(status.OK);
  expect(r.response!.degradation.level).toBe('L0');
  expect(r.response!.memories_included).toBe(n);
}

describe('pool faults (fault-injecting worker)', () => {
  const victim = tenant();
  const other = tenant();
  const suite = poolFaultSuite(
    'ibex-faults-pool-',
    (store) => {
      store.upsertMemories(memories(victim.org, victim.agent, N));
      store.upsertMemories(memories(other.org, other.agent, N));
      store.setDirective({
        org_id: victim.org,
        agent_id: victim.agent,
        content: DIRECTIVE,
        injection_mode: 'system_first',
        version_id: randomUUID(),
      });
    },
    { threads: 2, queue: 1 },
    {
      // The `heap` fault allocates until this limit ends its thread.
      IBEX_CONTEXT_POOL_MAX_OLD_GENERATION_MB: '16',
    },
  );

  it.each([
    ['a task that throws', 'throw'],
    ['a worker that exits mid-task', 'exit'],
    ['a worker over its memory limit', 'heap'],
  ])('%s ⇒ L2 pool_failed; the concurrent call and the next one are whole', async (_what, fault) => {
    const threads = suite.svc.pool.threadIds();
    const before = await scrape(suite.svc.adminUrl);
    const [bad, good] = await Promise.all([
      suite.svc.client.assemble(faultedRequest(victim, fault)),
      suite.svc.client.assemble(request(other)),
    ]);
    expectPoolDegraded(bad, 'pool_failed');
    expect(bad.response!.assembled_context.startsWith(`${DIRECTIVE}\n`)).toBe(true);
    expectFull(good);
    // The pool is whole again (an exited thread is replaced), and serves both threads' worth of calls.
    await vi.waitFor(() => expect(suite.svc.pool.threadIds()).toHaveLength(2), {
      timeout: 5000,
      interval: 20,
    });
    if (fault === 'throw') expect(suite.svc.pool.threadIds()).toEqual(threads);
    else expect(suite.svc.pool.threadIds().filter((id) => threads.includes(id))).toHaveLength(1);
    const next = await Promise.all([
      suite.svc.client.assemble(request(victim)),
      suite.svc.client.assemble(request(other)),
    ]);
    for (const r of next) expectFull(r);
    const after = await scrape(suite.svc.adminUrl);
    expect(moved(before, after, 'ibex_context_pool_tasks_total', { outcome: 'failed' })).toBe(1);
    expect(moved(before, after, 'ibex_context_pool_tasks_total', { outcome: 'completed' })).toBe(3);
    expect(moved(before, after, 'ibex_context_degraded_total', { level: 'L2', reason: 'pool_failed' })).toBe(
      1,
    );
    expect(moved(before, after, 'ibex_context_assemblies_total', { level: 'L2', code: 'OK' })).toBe(1);
  });

  it('queue full ⇒ L1 pool_saturated at once, memories from the main thread; the queued call waits its turn and is whole', async () => {
    const before = await scrape(suite.svc.adminUrl);
    // Both threads blocked 1 s, then one call queued (max queue 1): the next call cannot be taken.
    const sleepers = [1, 2].map(() => suite.svc.client.assemble(faultedRequest(other, 'sleep:1000')));
    await vi.waitFor(() => expect(suite.svc.pool.stats().running).toBe(2), { timeout: 5000, interval: 2 });
    const queued = suite.svc.client.assemble(request(other));
    await vi.waitFor(() => expect(suite.svc.pool.stats().queueSize).toBe(1), { timeout: 5000, interval: 2 });
    const bad = await suite.svc.client.assemble(request(victim));
    // Refused without waiting for a thread: both sleepers still hold theirs and the queued call still
    // waits (no real-clock bound: timing gates are bench figures).
    expect(suite.svc.pool.stats()).toMatchObject({ running: 2, queueSize: 1 });
    expectSteppedDegraded(bad, 'pool_saturated');
    expect(bad.response!.assembled_context.startsWith(`${DIRECTIVE}\n`)).toBe(true);
    for (const r of await Promise.all([...sleepers, queued])) expectFull(r);
    expectFull(await suite.svc.client.assemble(request(victim)));
    const after = await scrape(suite.svc.adminUrl);
    expect(moved(before, after, 'ibex_context_pool_tasks_total', { outcome: 'rejected' })).toBe(1);
    expect(moved(before, after, 'ibex_context_pool_tasks_total', { outcome: 'completed' })).toBe(4);
    expect(
      moved(before, after, 'ibex_context_degraded_total', { level: 'L1', reason: 'pool_saturated' }),
    ).toBe(1);
  });
});

describe('the real worker formats memories far larger than its heap (contents escaped from their bytes)', () => {
  let svc: TestService;
  const victim = tenant();
  const other = tenant();
  const MARKUP = '<&>';
  const REPEAT = 170_000;
  const HEAVY = 6;

  beforeAll(async () => {
    // A model with a 50M-token window: the packer selects every memory, and the worker escapes all of them.
    const catalog = path.join((await import('node:os')).tmpdir(), `ibex-faults-catalog-${randomUUID()}.json`);
    fs.writeFileSync(
      catalog,
      JSON.stringify({
        schema_version: 1,
        models: [
          {
            model_id: 'huge-window',
            provider: 'test',
            context_window: 50_000_000,
            max_output_tokens: 1000,
            supports_tools: false,
            supports_vision: false,
            supports_streaming: true,
            tokenizer_family: 'o200k_base',
          },
        ],
      }),
    );
    svc = await startTestService({
      IBEX_CONTEXT_CATALOG_FILE: catalog,
      IBEX_CONTEXT_POOL_MIN_THREADS: '2',
      IBEX_CONTEXT_POOL_MAX_THREADS: '2',
      IBEX_CONTEXT_POOL_MAX_OLD_GENERATION_MB: '16',
      IBEX_CONTEXT_TIMEOUT: '10000',
      IBEX_CONTEXT_DEADLINE_MS: '3000',
      IBEX_CONTEXT_HOT_TIMEOUT_MS: '3000',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '3000',
      IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '3000',
      // The memories below are 510,000 characters: above the default cap (65,536) they would be dropped
      // as oversize before reaching the worker.
      IBEX_CONTEXT_MAX_MEMORY_CHARS: '1000000',
    });
    fs.rmSync(catalog, { force: true });
    // 6 markup-heavy memories of 510 KB: 13 MB of escaped context. As strings (the escaped copies and their
    // join) that outgrew the worker's 16 MB heap; escaped from their bytes into the answer's buffer it does not.
    svc.store.upsertMemories(
      memories(victim.org, victim.agent, HEAVY).map((m) => ({
        ...m,
        content: `${m.content} ${MARKUP.repeat(REPEAT)}`,
      })),
    );
    svc.store.upsertMemories(memories(other.org, other.agent, N));
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('answers OK L0 with every memory escaped, and a concurrent small call of another org is whole', async () => {
    const threads = svc.service.pool.threadIds();
    const [heavy, small] = await Promise.all([
      svc.client.assemble(request(victim, { model: 'huge-window' })),
      svc.client.assemble(request(other)),
    ]);
    expect(heavy.status.code, heavy.status.details).toBe(status.OK);
    const res = heavy.response!;
    expect(res.degradation.reasons).toEqual([]);
    expect(res.degradation.level).toBe('L0');
    expect(res.memories_included).toBe(HEAVY);
    const context = res.assembled_context;
    expect(context.split('&lt;&amp;&gt;').length - 1).toBe(HEAVY * REPEAT);
    expect(context.includes(MARKUP)).toBe(false);
    expectFull(small);
    // No thread died of its heap.
    expect(svc.service.pool.threadIds()).toEqual(threads);
  });
});
