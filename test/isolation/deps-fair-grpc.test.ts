/**
 * Issue 9 item 3 end to end: real gRPC on loopback, the production pipeline with the fault-injecting
 * worker on ONE pool thread. A noisy org floods calls whose CPU stage holds the thread (`FAULT:sleep`);
 * a quiet org's call, sent after the flood, is served right after at most one more noisy task instead of
 * behind all of them, and stays L0. Asserted on order and outcomes, not on durations.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedStore } from '../../src/retrieval/embedded-store.js';
import { memories, request, tenant } from '../e2e/harness.js';
import { FAULT_PREFIX, type PoolFaultService, startPoolFaultService } from '../faults/helpers.js';

const NOISY = tenant();
const QUIET = tenant();
const FLOOD = 6;

describe('pool fairness over gRPC (one thread)', () => {
  let svc: PoolFaultService;
  let store: EmbeddedStore;
  let dir: string;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ibex-fair-'));
    const db = path.join(dir, 'store.db');
    store = EmbeddedStore.open(db);
    store.upsertMemories(memories(QUIET.org, QUIET.agent, 3));
    store.upsertMemories(memories(NOISY.org, NOISY.agent, 3));
    svc = await startPoolFaultService({
      IBEX_CONTEXT_EMBEDDED_DB: db,
      // Generous: the flood takes FLOOD × 150 ms of the one thread; nothing here may time out.
      IBEX_CONTEXT_TIMEOUT: '20000',
      IBEX_CONTEXT_DEADLINE_MS: '10000',
      IBEX_CONTEXT_HOT_TIMEOUT_MS: '10000',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '10000',
      IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '10000',
      // Store reads on the main thread: the store-read queue's own shedding is not under test here.
      IBEX_CONTEXT_EMBEDDED_READ_THREADS: '0',
      IBEX_CONTEXT_POOL_MIN_THREADS: '1',
      IBEX_CONTEXT_POOL_MAX_THREADS: '1',
      IBEX_CONTEXT_POOL_MAX_QUEUE: '16',
    });
  });
  afterAll(async () => {
    await svc?.stop();
    store?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("a noisy org's heavy calls wait behind each other, not in front of the quiet org's call", async () => {
    const order: string[] = [];
    const heavy = request(NOISY, {
      recent_messages: [{ role: 'user', content: `${FAULT_PREFIX}sleep:150` }],
    });
    const noisy = Array.from({ length: FLOOD }, (_, i) =>
      svc.client.assemble(heavy, { deadlineMs: 20_000 }).then((r) => {
        order.push(`noisy-${i}`);
        return r;
      }),
    );
    // Sent once the flood is in the pool: one task running, the rest queued.
    while (svc.pool.stats().queueSize < FLOOD - 1) await new Promise((resolve) => setTimeout(resolve, 5));
    const quiet = await svc.client.assemble(request(QUIET), { deadlineMs: 20_000 }).then((r) => {
      order.push('quiet');
      return r;
    });
    expect(quiet.status.code, quiet.status.details).toBe(status.OK);
    expect(quiet.response!.degradation.level, JSON.stringify(quiet.response!.degradation)).toBe('L0');
    expect(quiet.response!.memories_included).toBe(3);
    const results = await Promise.all(noisy);
    for (const r of results) expect(r.status.code, r.status.details).toBe(status.OK);
    // FIFO would answer the quiet call last (after all six). Round-robin: after the running task and at
    // most one more noisy one.
    expect(order.indexOf('quiet')).toBeLessThanOrEqual(2);
    expect(order).toHaveLength(FLOOD + 1);
  });
});
