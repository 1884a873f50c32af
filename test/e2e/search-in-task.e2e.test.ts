/**
 * IBEX_CONTEXT_SEARCH_IN_CPU_TASK (src/pool/task-search.ts, issue 10): the cold search run by the CPU task
 * gives the same answers, byte for byte, as the store-read thread's, over gRPC on loopback with the real
 * pool: two services on one embedded store, one with the setting, the same requests to both.
 */
import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AssembleContextResponse } from '../../src/server/proto.js';
import { memories, request, startTestService, type TestService, tenant } from './harness.js';

let searched: TestService;
let inTask: TestService;
const t = tenant();
const cjk = tenant();
const other = tenant();

beforeAll(async () => {
  searched = await startTestService();
  inTask = await startTestService({
    IBEX_CONTEXT_EMBEDDED_DB: searched.settings.embeddedDb,
    IBEX_CONTEXT_SEARCH_IN_CPU_TASK: 'true',
  });
  // 30 memories: the 20 most recent are hot, and most of them also match the query (dedupe).
  searched.store.upsertMemories(memories(t.org, t.agent, 30, 'sailing <b>&amp;</b> "knots"'));
  searched.store.upsertMemories([
    {
      id: randomUUID(),
      org_id: t.org,
      agent_id: t.agent,
      content: 'An old note about sailing, from long ago.',
      category: 'episodic',
      confidence: 1,
      created_at: Date.UTC(2020, 0, 1),
    },
  ]);
  searched.store.upsertMemories(memories(cjk.org, cjk.agent, 8, '用户喜欢喝绿茶 😀'));
  searched.store.upsertMemories(memories(other.org, t.agent, 5, 'sailing secret'));
}, 30_000);

afterAll(async () => {
  await inTask?.stop();
  await searched?.stop();
});

/** The answer without what differs by design between two calls: the nonce and the timings. */
function comparable(res: AssembleContextResponse) {
  const nonce = /<ibex_memory nonce="([A-Za-z0-9_-]{22})"/.exec(res.assembled_context)?.[1] ?? 'none';
  return {
    context: res.assembled_context.replaceAll(nonce, 'NONCE'),
    tokens_used: res.tokens_used,
    memories_included: res.memories_included,
    memory_tokens: res.memory_tokens,
    rows: res.memories_used,
    level: res.degradation.level,
    reasons: res.degradation.reasons,
    branches: res.degradation.branches.map((b) => [b.name, b.status, b.detail]),
  };
}

describe('the cold search in the CPU task', () => {
  it('gives the store-read thread’s answers: dedupe, the max_memories cut, budgets, escaping, CJK', async () => {
    const cases = [
      request(t),
      request(t, { query: 'old note sailing' }),
      request(t, { options: { max_memories: 4 } }),
      request(t, { available_tokens: 300 }),
      request(t, { options: { max_memories: 25 }, available_tokens: 600 }),
      request(t, { query: 'knots' }),
      request(t, { query: 'nothing matches this' }),
      request(cjk, { query: '绿茶' }),
    ];
    for (const req of cases) {
      const [a, b] = await Promise.all([searched.client.assemble(req), inTask.client.assemble(req)]);
      expect(a.status.code).toBe(status.OK);
      expect(b.status.code).toBe(status.OK);
      expect(comparable(b.response!)).toEqual(comparable(a.response!));
      expect(b.response!.degradation.level).toBe('L0');
    }
  });

  it('never shows another org’s memories of the same agent id', async () => {
    const r = await inTask.client.assemble(request(t, { query: 'secret' }));
    expect(r.response!.assembled_context).not.toContain('secret');
    expect(r.response!.memories_used).toHaveLength(20);
  });

  it('answers L1 with the store’s error as the cold detail when the search fails', async () => {
    // The FTS index is dropped under the running service (another connection): the hot read still works,
    // every search fails in SQLite.
    const broken = await startTestService({ IBEX_CONTEXT_SEARCH_IN_CPU_TASK: 'true' });
    try {
      const u = tenant();
      broken.store.upsertMemories(memories(u.org, u.agent, 3));
      // Hot is read (and cached) before the index goes.
      expect((await broken.client.assemble(request(u))).response!.degradation.level).toBe('L0');
      const raw = new Database(broken.settings.embeddedDb);
      raw.exec('DROP TABLE memories_fts');
      raw.close();
      const r = await broken.client.assemble(request(u));
      expect(r.status.code).toBe(status.OK);
      const res = r.response!;
      expect(res.degradation.level).toBe('L1');
      const cold = res.degradation.branches.find((b) => b.name === 'cold')!;
      expect(cold.status).toBe('error');
      expect(cold.detail).toBe('embedded store unavailable (SQLITE_ERROR)');
      expect(res.degradation.reasons).toEqual(['cold_error:embedded store unavailable (SQLITE_ERROR)']);
    } finally {
      await broken.stop();
    }
  });
});
