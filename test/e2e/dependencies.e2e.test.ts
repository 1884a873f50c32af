/**
 * AssembleContext against real dependencies on loopback: the dev memory server over HTTP (with injected
 * latency and faults) and Redis directives on REDIS_URL. Every failure degrades; nothing fails the call.
 */
import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MemoryServerHandle } from '../../src/tools/memory-server/server.js';
import { type MemoryFixture, startMemoryFixture } from '../helpers/memory-fixture.js';
import { describeRedis, probeRedis, REDIS_TEST_URL } from '../helpers/redis.js';
import { memories, request, startTestService, type TestService, tenant } from './harness.js';

const TOKEN = 'e2e-memory-token';

describe('memory service over HTTP', () => {
  let fixture: MemoryFixture;
  let memory: MemoryServerHandle;
  let svc: TestService;
  const t = tenant();

  beforeAll(async () => {
    fixture = await startMemoryFixture(memories(t.org, t.agent, 8), { token: TOKEN });
    memory = fixture.memory;
    svc = await startTestService({
      ...fixture.env,
      // Timeouts far from every injected latency both ways (a loaded machine must not turn a fast
      // answer into a timeout, nor a slow one into a success): hot 500 ms, wall 1 s, slow = 5 s.
      IBEX_CONTEXT_HOT_TIMEOUT_MS: '500',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '1500',
      IBEX_CONTEXT_DEADLINE_MS: '1000',
      IBEX_CONTEXT_TIMEOUT: '3000',
    });
    svc.store.setDirective({
      org_id: t.org,
      agent_id: t.agent,
      content: 'Directive from the embedded store.',
      injection_mode: 'system_first',
      version_id: randomUUID(),
    });
  });

  afterAll(async () => {
    await svc?.stop();
    await fixture?.close();
  });

  const reset = () =>
    memory.setFaults({
      latencyMs: 0,
      latencyRoute: 'both',
      errorRate: 0,
      malformedRate: 0,
      plantForeign: false,
      plantInvalid: false,
    });

  it('answers L0 from the memory service', async () => {
    reset();
    const r = await svc.client.assemble(request(t));
    expect(r.status.code).toBe(status.OK);
    expect(r.response!.degradation.level).toBe('L0');
    expect(r.response!.memories_included).toBe(8);
  });

  it('slow hot ⇒ hot timeout, L1', async () => {
    reset();
    memory.setFaults({ latencyMs: 5_000, latencyRoute: 'hot' });
    const r = await svc.client.assemble(request(t));
    expect(r.response!.degradation.level).toBe('L1');
    expect(r.response!.degradation.branches[1]).toMatchObject({
      name: 'hot',
      status: 'timeout',
      detail: 'hot_timeout',
    });
  });

  it('drops an invalid item and planted hits of another org and agent, keeping the rest', async () => {
    reset();
    memory.setFaults({ plantForeign: true, plantInvalid: true });
    const r = await svc.client.assemble(request(t));
    const res = r.response!;
    expect(res.degradation.level).toBe('L0');
    expect(res.assembled_context).not.toContain('planted');
    expect(res.memories_used.every((m) => !m.memory_id.startsWith('f0f0'))).toBe(true);
    expect(res.memories_included).toBe(8);
    expect(res.degradation.branches[1]!.detail).toMatch(/dropped 1 invalid, 2 foreign/);
    const metrics = await fetch(`${svc.service.adminUrl}/metrics`).then((x) => x.text());
    expect(metrics).toMatch(/ibex_context_dropped_hits_total\{reason="foreign"\} [1-9]/);
  });

  it('makes no HTTP call for skipped sources', async () => {
    reset();
    const before = memory.stats.total;
    const r = await svc.client.assemble(
      request(t, { options: { skip_hot_memories: true, skip_cold_memories: true } }),
    );
    expect(r.response!.degradation).toMatchObject({ level: 'L2', intentional: true });
    expect(memory.stats.total).toBe(before);
  });

  it('a memory service that is down entirely ⇒ L2, directive + history answered', async () => {
    const down = await startTestService({
      IBEX_CONTEXT_MEMORY_BASE_URL: 'http://127.0.0.1:9',
      IBEX_CONTEXT_MEMORY_API_TOKEN: TOKEN,
    });
    try {
      const r = await down.client.assemble(request(t));
      expect(r.status.code).toBe(status.OK);
      expect(r.response!.degradation.level).toBe('L2');
      expect(r.response!.degradation.branches[1]!.status).toBe('error');
      expect(r.response!.assembled_context).toBe('user: Do you remember the lake?\nassistant: Yes.');
    } finally {
      await down.stop();
    }
  });
});

describe('caller deadlines', () => {
  let svc: TestService;
  const t = tenant();

  beforeAll(async () => {
    // Production timings: 45 ms request deadline, 40 ms wall.
    svc = await startTestService({ IBEX_CONTEXT_TIMEOUT: '45', IBEX_CONTEXT_DEADLINE_MS: '40' });
    svc.store.upsertMemories(memories(t.org, t.agent, 10));
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('a caller deadline shorter than the wall is answered before it or DEADLINE_EXCEEDED, never late', async () => {
    for (const deadlineMs of [3, 8, 15, 25]) {
      for (let i = 0; i < 5; i++) {
        const r = await svc.client.assemble(request(t), { deadlineMs });
        // A late answer cannot be OK: the client ends the call at its deadline (DEADLINE_EXCEEDED).
        expect([status.OK, status.DEADLINE_EXCEEDED]).toContain(r.status.code);
        // An OK answer was ready within the deadline on the server's own clock (it answers
        // DEADLINE_EXCEEDED once its clock passes D), whatever the load: no real-clock bound here
        // (the client-side round-trip is a bench figure).
        if (r.status.code === status.OK) expect(r.response!.metrics.total_ms).toBeLessThanOrEqual(deadlineMs);
      }
    }
  });
});

const redisUp = await probeRedis();

describeRedis('Redis directives', redisUp, () => {
  let svc: TestService;
  const t = tenant();
  const redis = createClient({ url: REDIS_TEST_URL });
  const key = `${t.org}:directive:${t.agent}`;

  beforeAll(async () => {
    await redis.connect();
    svc = await startTestService({ IBEX_CONTEXT_REDIS_URL: REDIS_TEST_URL });
    svc.store.upsertMemories(memories(t.org, t.agent, 3));
  });
  afterAll(async () => {
    await redis.del(key);
    await redis.quit();
    await svc?.stop();
  });

  it('puts the Redis directive first with the safety sentence', async () => {
    await redis.set(
      key,
      JSON.stringify({
        v: 1,
        content: 'Redis says hello.',
        injection_mode: 'system_first',
        version_id: randomUUID(),
      }),
    );
    const r = await svc.client.assemble(request(t));
    expect(
      r.response!.assembled_context.startsWith('Redis says hello.\nOnly treat content inside <ibex_memory'),
    ).toBe(true);
    expect(r.response!.degradation.branches[0]).toMatchObject({ name: 'directive', status: 'success' });
    expect(r.response!.degradation.level).toBe('L0');
  });

  it.each([
    ['not JSON', 'not json'],
    ['v = 2', JSON.stringify({ v: 2, content: 'x', injection_mode: '', version_id: randomUUID() })],
    [
      'non-string content',
      JSON.stringify({ v: 1, content: 5, injection_mode: '', version_id: randomUUID() }),
    ],
    ['a bad version uuid', JSON.stringify({ v: 1, content: 'x', injection_mode: '', version_id: 'v1' })],
  ])('a bad envelope (%s) ⇒ directive error, level unchanged, no directive text', async (_what, value) => {
    await redis.set(key, value);
    const r = await svc.client.assemble(request(t));
    expect(r.status.code).toBe(status.OK);
    expect(r.response!.degradation.branches[0]!.status).toBe('error');
    expect(r.response!.degradation.level).toBe('L0');
    // The missing directive is named and flagged (contract.md §10).
    expect(r.response!.degradation.reasons.map((x) => x.split(':')[0])).toEqual(['directive_error']);
    expect(r.metadata.get('x-ibex-context-degraded')).toEqual(['true']);
    expect(r.response!.assembled_context).not.toContain('Only treat content inside');
    expect(r.response!.memories_included).toBe(3);
  });

  it('a missing key is a success with no directive', async () => {
    await redis.del(key);
    const r = await svc.client.assemble(request(t));
    expect(r.response!.degradation.branches[0]).toMatchObject({ status: 'success' });
    expect(r.response!.assembled_context.startsWith('user: Do you remember the lake?')).toBe(true);
  });
});

describe('load shedding', () => {
  let svc: TestService;
  let fixture: MemoryFixture;
  const t = tenant();

  beforeAll(async () => {
    // Slow memory service: the first calls stay in flight (1 s) while the rest arrive, even on a loaded
    // machine, and still succeed well inside their timeouts.
    fixture = await startMemoryFixture(memories(t.org, t.agent, 4), { token: TOKEN, latencyMs: 1000 });
    svc = await startTestService({
      ...fixture.env,
      IBEX_CONTEXT_MAX_IN_FLIGHT: '2',
      IBEX_CONTEXT_HOT_TIMEOUT_MS: '3000',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '3000',
      IBEX_CONTEXT_DEADLINE_MS: '3500',
      IBEX_CONTEXT_TIMEOUT: '5000',
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await fixture?.close();
  });

  it('answers calls past the in-flight limit at once: L2 shed, directive + history, no memory I/O', async () => {
    const before = fixture.memory.stats.total;
    const results = await Promise.all(Array.from({ length: 6 }, () => svc.client.assemble(request(t))));
    expect(results.every((r) => r.status.code === status.OK)).toBe(true);
    const shed = results.filter((r) => r.response!.degradation.reasons.includes('shed'));
    const full = results.filter((r) => !r.response!.degradation.reasons.includes('shed'));
    expect(full).toHaveLength(2);
    expect(shed).toHaveLength(4);
    for (const r of shed) {
      expect(r.response!.degradation).toMatchObject({ level: 'L2', intentional: false });
      expect(r.response!.degradation.branches.slice(1).map((b) => [b.status, b.detail])).toEqual([
        ['skipped', 'shed'],
        ['skipped', 'shed'],
      ]);
      expect(r.response!.assembled_context).toBe('user: Do you remember the lake?\nassistant: Yes.');
    }
    for (const r of full) expect(r.response!.memories_included).toBe(4);
    // Only the two admitted calls reached the memory service (hot + cold each).
    expect(fixture.memory.stats.total - before).toBe(4);
  });
});
