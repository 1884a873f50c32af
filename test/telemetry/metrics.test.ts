/**
 * Metrics that must not mislead (contract.md §12), scraped from the `/metrics` endpoint of a
 * real admin server in front of the real pipeline: every AssembleContext call is timed by level and gRPC
 * code (failed ones too); a CPU task abandoned while running is counted `abandoned`, not `withdrawn`;
 * pool capacity, queue limit and build_info are exported. Plus the server option that turns channelz off.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { createGrpcServer } from '../../src/grpc/grpc-server.js';
import { PooledStoreReads } from '../../src/retrieval/sqlite/store-reader.js';
import { startAdminServer } from '../../src/telemetry/admin-server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { createMetrics } from '../../src/telemetry/metrics.js';
import { Errors, isIbexError } from '../../src/wire/errors.js';
import { memories, request, tenant } from '../e2e/harness.js';
import { faultedRequest, moved, scrape } from '../faults/helpers.js';
import { poolFaultSuite } from '../helpers/pool-fault-suite.js';
import { memoriesOf, removeTempDir, tempStore } from '../retrieval/fixtures.js';

const DURATION = 'ibex_context_assembly_duration_seconds_count';
const CALLS = 'ibex_context_assemblies_total';
const TASKS = 'ibex_context_pool_tasks_total';

describe('metrics on /metrics of a real admin server', () => {
  const t = tenant();
  const suite = poolFaultSuite(
    'ibex-metrics-',
    (store) => store.upsertMemories(memories(t.org, t.agent, 3)),
    { threads: 2, queue: 3 },
    {
      // The request deadline D is the server's own (2 s), so the degraded answer at D is not raced
      // by a client-side deadline.
      // 2 s, not 800 ms: in the full suite under two busy loops the pool's miss reached the main thread up
      // to 31 ms late and the degraded answer took 18 ms more; D keeps 5 % of what is left for that.
      IBEX_CONTEXT_TIMEOUT: '2000',
    },
  );

  it('assembly_duration_seconds counts an OK call by its level and code OK', async () => {
    const before = await scrape(suite.svc.adminUrl);
    const r = await suite.svc.client.assemble(request(t));
    expect(r.status.code, r.status.details).toBe(status.OK);
    const after = await scrape(suite.svc.adminUrl);
    expect(moved(before, after, DURATION, { level: 'L0', code: 'OK' })).toBe(1);
    expect(moved(before, after, CALLS, { level: 'L0', code: 'OK' })).toBe(1);
    expect(moved(before, after, DURATION)).toBe(1);
    expect(moved(before, after, TASKS, { outcome: 'completed' })).toBe(1);
  });

  it('assembly_duration_seconds counts refused calls too: INVALID_ARGUMENT and unknown model, level none', async () => {
    const before = await scrape(suite.svc.adminUrl);
    const bad = await suite.svc.client.assemble(request({ org: 'not-a-uuid', agent: t.agent }));
    expect(bad.status).toMatchObject({ code: status.INVALID_ARGUMENT, details: 'org_id must be a UUID' });
    const unknown = await suite.svc.client.assemble(request(t, { model: 'no-such-model' }));
    expect(unknown.status.code).toBe(status.INVALID_ARGUMENT);
    const after = await scrape(suite.svc.adminUrl);
    expect(moved(before, after, DURATION, { level: 'none', code: 'INVALID_ARGUMENT' })).toBe(2);
    expect(moved(before, after, CALLS, { level: 'none', code: 'INVALID_ARGUMENT' })).toBe(2);
    expect(moved(before, after, DURATION, { code: 'OK' })).toBe(0);
  });

  it('a task running past D (sleep 2600 ms, D 2000 ms) is answered OK L1 pool_deadline before D and counted abandoned, not withdrawn', async () => {
    const before = await scrape(suite.svc.adminUrl);
    const r = await suite.svc.client.assemble(faultedRequest(t, 'sleep:2600'));
    // The task runs past D (2 s): the pool gives up on it while its thread keeps running, and the
    // service still answers before D with the degraded answer (contract.md §10 answer guarantee), never
    // DEADLINE_EXCEEDED: 2 s leaves far more than the 10 ms the guarantee needs. It keeps the memories
    // that fit (L1; test/e2e/degraded-memories.e2e.test.ts checks them).
    expect(r.status.code, r.status.details).toBe(status.OK);
    expect(r.response!.degradation.level).toBe('L1');
    expect(r.response!.degradation.reasons).toEqual(['pool_deadline']);
    expect(r.response!.assembled_context).toContain('user: Do you remember the lake?');
    expect(r.response!.metrics.total_ms).toBeLessThanOrEqual(2000);
    const after = await scrape(suite.svc.adminUrl);
    expect(moved(before, after, TASKS, { outcome: 'abandoned' })).toBe(1);
    expect(moved(before, after, TASKS, { outcome: 'withdrawn' })).toBe(0);
    expect(moved(before, after, DURATION, { level: 'L1', code: 'OK' })).toBe(1);
    expect(moved(before, after, DURATION, { code: 'DEADLINE_EXCEEDED' })).toBe(0);
  });

  it('exports pool capacity, queue limit and build_info', async () => {
    const m = await scrape(suite.svc.adminUrl);
    expect(m.value('ibex_context_pool_capacity')).toBe(2);
    expect(m.value('ibex_context_pool_queue_limit')).toBe(3);
    const pkg = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, '../../package.json'), 'utf8'));
    expect(
      m.value('ibex_context_build_info', { version: pkg.version, node_version: process.versions.node }),
    ).toBe(1);
  });
});

describe('memory-fetch thread reads and heavy orgs', () => {
  it('exports what the routed memory source reports, and 0 without one', async () => {
    let stats = { threadReads: 3, heavyOrgs: 1 };
    const withThread = createMetrics(undefined, undefined, () => stats);
    const without = createMetrics();
    const health = () => ({ ready: true, draining: false, warnings: [] });
    const a = await startAdminServer('127.0.0.1:0', withThread.registry, health);
    const b = await startAdminServer('127.0.0.1:0', without.registry, health);
    try {
      let m = await scrape(a.url);
      expect(m.value('ibex_context_memory_thread_reads_total')).toBe(3);
      expect(m.value('ibex_context_memory_heavy_orgs')).toBe(1);
      stats = { threadReads: 7, heavyOrgs: 0 };
      m = await scrape(a.url);
      expect(m.value('ibex_context_memory_thread_reads_total')).toBe(7);
      expect(m.value('ibex_context_memory_heavy_orgs')).toBe(0);
      const n = await scrape(b.url);
      expect(n.value('ibex_context_memory_thread_reads_total')).toBe(0);
      expect(n.value('ibex_context_memory_heavy_orgs')).toBe(0);
    } finally {
      await a.close();
      await b.close();
      withThread.stop();
      without.stop();
    }
  });
});

describe('store-read queue depth and busy rejections', () => {
  it('a burst of 30 searches on 1 store-read thread (queue 4): the refused ones are counted on /metrics', async () => {
    const { store, dir, file } = tempStore();
    const org = randomUUID();
    const agent = randomUUID();
    store.upsertMemories(memoriesOf(org, agent, 20));
    const reads = await PooledStoreReads.start(file, 1);
    const metrics = createMetrics(undefined, () => reads.stats());
    const admin = await startAdminServer('127.0.0.1:0', metrics.registry, () => ({
      ready: true,
      draining: false,
      warnings: [],
    }));
    try {
      const before = await scrape(admin.url);
      expect(before.value('ibex_context_store_read_busy_total')).toBe(0);
      const pending = Array.from({ length: 30 }, () => reads.search(org, agent, 'sailing'));
      const settled = Promise.allSettled(pending);
      // Right after the burst: 2 searches on the thread (PIPELINE_DEPTH), 4 waiting (the queue limit), the
      // rest refused.
      expect(reads.stats().queueSize).toBe(4);
      const outcomes = await settled;
      const busy = outcomes.filter(
        (o) => o.status === 'rejected' && (o.reason as { code?: string }).code === 'busy',
      ).length;
      expect(busy).toBe(24);
      expect(outcomes.filter((o) => o.status === 'fulfilled').length).toBe(6);
      const after = await scrape(admin.url);
      expect(after.value('ibex_context_store_read_busy_total')).toBe(busy);
      expect(await (await fetch(`${admin.url}/metrics`)).text()).toMatch(
        /^ibex_context_store_read_queue_depth 0$/m,
      );
    } finally {
      await admin.close();
      metrics.stop();
      await reads.close();
      store.close();
      removeTempDir(dir);
    }
  });
});

describe('pool deadline errors carry their reason', () => {
  it.each(['withdrawn', 'abandoned'] as const)(
    'Errors.poolDeadline(%s) keeps it as a typed field',
    (reason) => {
      const err = Errors.poolDeadline(reason, new Error('x'));
      expect(isIbexError(err, 'IBEX_ERR_POOL_DEADLINE')).toBe(true);
      expect(err.poolReason).toBe(reason);
    },
  );
});

describe('server options', () => {
  it('channelz is off on the gRPC server', () => {
    const grpc = createGrpcServer({
      assemble: async () => {
        throw new Error('unused');
      },
      logger: createLogger({ logLevel: 'silent' }),
      settings: { timeoutMs: 1000, maxReceiveMessageBytes: 1 << 20, maxMetadataBytes: 16 * 1024 },
    });
    expect((grpc.server as unknown as { channelzEnabled: boolean }).channelzEnabled).toBe(false);
  });
});
