/**
 * The pool's fair queue over gRPC: a noisy org's flood of heavy calls on a one-thread pool does not queue
 * in front of a quiet org's call.
 */
import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { FAULT_PREFIX } from '../faults/helpers.js';
import { poolFaultSuite } from '../helpers/pool-fault-suite.js';
import { memories, request, roomyDeadlines, tenant } from './harness.js';

const NOISY = tenant();
const QUIET = tenant();
const FLOOD = 6;

describe('pool fairness over gRPC (one thread)', () => {
  const suite = poolFaultSuite(
    'ibex-fair-',
    (store) => {
      store.upsertMemories(memories(QUIET.org, QUIET.agent, 3));
      store.upsertMemories(memories(NOISY.org, NOISY.agent, 3));
    },
    { threads: 1, queue: 16 },
    {
      // Generous: the flood takes FLOOD × 150 ms of the one thread; nothing here may time out.
      ...roomyDeadlines(20_000, 10_000, { directive: true }),
      // Store reads on the main thread: the store-read queue's own shedding is not under test here.
      IBEX_CONTEXT_EMBEDDED_READ_THREADS: '0',
    },
  );

  it("a noisy org's heavy calls wait behind each other, not in front of the quiet org's call", async () => {
    const order: string[] = [];
    const heavy = request(NOISY, {
      recent_messages: [{ role: 'user', content: `${FAULT_PREFIX}sleep:150` }],
    });
    const noisy = Array.from({ length: FLOOD }, (_, i) =>
      suite.svc.client.assemble(heavy, { deadlineMs: 20_000 }).then((r) => {
        order.push(`noisy-${i}`);
        return r;
      }),
    );
    // Sent once the flood is in the pool: one task running, the rest queued.
    while (suite.svc.pool.stats().queueSize < FLOOD - 1)
      await new Promise((resolve) => setTimeout(resolve, 5));
    const quiet = await suite.svc.client.assemble(request(QUIET), { deadlineMs: 20_000 }).then((r) => {
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
