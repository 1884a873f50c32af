/**
 * The CPU stage's filters end to end over gRPC, on the dev memory server over HTTP: a memory repeating the
 * history is `filter`, a hot hit sharing nothing with the query gets a lexical relevance of 0 (`filter`
 * under the floor), and IBEX_CONTEXT_MEMORY_DATES writes each memory's date attribute.
 */
import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MemoryRow } from '../../src/retrieval/sqlite/embedded-store.js';
import { type MemoryFixture, startMemoryFixture } from '../helpers/memory-fixture.js';
import { request, startTestService, type TestService, tenant } from './harness.js';

const TOKEN = 'e2e-filters-token';
const DAY = Date.UTC(2023, 4, 8, 13, 56);

describe('CPU-stage filters over a memory service', () => {
  const t = tenant();
  const row = (content: string, category = 'episodic'): MemoryRow => ({
    id: randomUUID(),
    org_id: t.org,
    agent_id: t.agent,
    content,
    category,
    confidence: 0.8,
    created_at: DAY,
  });
  const sailing = row('Caroline went sailing on the lake with her kids');
  const repeat = row('Do you remember the lake?');
  const unrelated = row('Melanie paints sunsets in watercolour', 'factual');
  let memory: MemoryFixture;
  const services: TestService[] = [];

  beforeAll(async () => {
    memory = await startMemoryFixture([sailing, repeat, unrelated], { token: TOKEN });
  });
  afterAll(async () => {
    for (const s of services) await s.stop();
    await memory?.close();
  });

  async function service(env: Record<string, string>): Promise<TestService> {
    const s = await startTestService({
      ...memory.env,
      IBEX_CONTEXT_HOT_TIMEOUT_MS: '1500',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '1500',
      IBEX_CONTEXT_DEADLINE_MS: '2000',
      IBEX_CONTEXT_TIMEOUT: '4000',
      ...env,
    });
    services.push(s);
    return s;
  }

  it('filters the history repeat and the unrelated hot hit; the rest carries its date only when asked', async () => {
    const plain = await service({});
    const dated = await service({ IBEX_CONTEXT_MEMORY_DATES: 'true' });
    const ask = request(t, { query: 'sailing with the kids' });
    const [off, on] = await Promise.all([plain.client.assemble(ask), dated.client.assemble(ask)]);
    for (const r of [off, on]) {
      expect(r.status.code).toBe(status.OK);
      const res = r.response!;
      expect(res.degradation.level).toBe('L0');
      const rows = new Map(res.memories_used.map((m) => [m.memory_id, m]));
      expect(rows.get(sailing.id)).toMatchObject({ exclusion: 'included' });
      expect(rows.get(repeat.id)).toMatchObject({ exclusion: 'filter' });
      // Hot only (the search does not return it): measured lexically against the query, nothing shared.
      expect(rows.get(unrelated.id)).toMatchObject({ exclusion: 'filter', relevance_score: 0 });
      expect(rows.get(sailing.id)!.relevance_score).toBeGreaterThan(0);
      expect(res.memories_included).toBe(1);
      expect(res.assembled_context).not.toContain('Melanie');
    }
    expect(off.response!.assembled_context).not.toContain(' date="');
    expect(on.response!.assembled_context).toContain(
      `id="${sailing.id}" category="episodic" date="2023-05-08">`,
    );
    // max_memories counts what is left after the filters: the repeat (recent, hot) does not take the slot.
    const one = await plain.client.assemble(
      request(t, { query: 'sailing with the kids', options: { max_memories: 1 } }),
    );
    expect(one.response!.memories_included).toBe(1);
    expect(one.response!.memories_used.find((m) => m.exclusion === 'included')!.memory_id).toBe(sailing.id);
    const cost = (r: typeof off) =>
      r.response!.memories_used.find((m) => m.memory_id === sailing.id)!.token_estimate;
    expect(cost(on)).toBeGreaterThan(cost(off));
  });
});
