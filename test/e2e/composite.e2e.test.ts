/**
 * composite_v1 over real gRPC: the default schema, relevance for hot memories, the floor, and the
 * per-request weights' checks.
 */
import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { memories, request, tenant, useTestService } from './harness.js';

describe('composite_v1 over gRPC', () => {
  const svc = useTestService();

  it('answers composite_v1; a recent memory that shares nothing with the query is `filter`', async () => {
    const t = tenant();
    const topical = memories(t.org, t.agent, 3, 'sailing');
    const unrelated = {
      ...memories(t.org, t.agent, 1, 'cooking')[0]!,
      id: randomUUID(),
      content: 'bought new pans for the kitchen',
      // A category no topical memory has: otherwise it is the next memory after a hit, a dialogue
      // neighbour, which is meant to be raised (test/retrieval/neighbours.test.ts).
      category: 'episodic',
      created_at: Date.UTC(2025, 6, 1),
    };
    svc().store.upsertMemories([...topical, unrelated]);
    const r = await svc().client.assemble(request(t, { query: 'sailing trip' }));
    expect(r.status.code).toBe(status.OK);
    const res = r.response!;
    expect(res.score_schema).toBe('composite_v1');
    const rows = new Map(res.memories_used.map((m) => [m.memory_id, m]));
    expect(rows.get(unrelated.id)?.exclusion).toBe('filter');
    for (const m of topical) expect(rows.get(m.id)?.exclusion).toBe('included');
  });

  it.each([
    ['relevance_weight', { relevance_weight: -1 }],
    ['recency_weight', { recency_weight: Number.POSITIVE_INFINITY }],
  ])('refuses a bad %s with INVALID_ARGUMENT naming it', async (field, options) => {
    const r = await svc().client.assemble(request(tenant(), { options }));
    expect(r.status.code).toBe(status.INVALID_ARGUMENT);
    expect(r.status.details).toContain(field);
  });

  it('accepts per-request weights', async () => {
    const t = tenant();
    svc().store.upsertMemories(memories(t.org, t.agent, 3, 'sailing'));
    const r = await svc().client.assemble(
      request(t, { options: { relevance_weight: 1, recency_weight: 0.5 } }),
    );
    expect(r.status.code).toBe(status.OK);
    expect(r.response!.memories_included).toBe(3);
  });
});
