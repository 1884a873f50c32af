/**
 * SearchMemories and RecordMemoryFeedback over gRPC loopback against the real service, on the embedded
 * store and on PostgreSQL (contract.md §2, §7a): the usefulness step stored at once, another org's and
 * unknown ids ignored and counted, a token of one org refused for another, validation naming fields,
 * the store's search scoped and filtered, inclusions counted into `retrieval_count`, and usefulness read
 * back by the composite. In front of a memory service both answer UNIMPLEMENTED.
 */
import { createHash, randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerAuthInterceptor } from '../../src/auth/bearer-interceptor.js';
import { parseTokenFile } from '../../src/auth/token-file.js';
import type { PgStore } from '../../src/retrieval/postgres/pg-store.js';
import type { MemoryRow } from '../../src/retrieval/sqlite/embedded-store.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { startMemoryFixture } from '../helpers/memory-fixture.js';
import { adminQuery, describePg, dropSchema, PG_TEST_URL, pgTestFile } from '../helpers/postgres.js';
import * as e2e from './harness.js';

const TOKEN_A = 'orgA-7c1e2b9d4a6f3058';
const TOKEN_ANY = 'ops-0a1b2c3d4e5f6a7b';
const A = e2e.tenant();
const B = { org: randomUUID(), agent: A.agent };

const TOKENS = JSON.stringify({
  tokens: [
    { name: 'org-a', token_sha256: createHash('sha256').update(TOKEN_A).digest('hex'), orgs: [A.org] },
    { name: 'ops', token: TOKEN_ANY, orgs: ['*'] },
  ],
});
const bearer = (token: string) => ({ metadata: { authorization: `Bearer ${token}` } });
const ops = bearer(TOKEN_ANY);

/** What a backend's suite needs of its store. */
interface Backend {
  env: () => Record<string, string>;
  seed(svc: e2e.TestService, rows: MemoryRow[]): Promise<void>;
  row(svc: e2e.TestService, id: string): Promise<{ usefulness: number; inclusions: number } | undefined>;
  cleanup(): Promise<void>;
}

const { reachable, schema } = await pgTestFile('memrpc');

const embedded: Backend = {
  env: () => ({}),
  async seed(svc, rows) {
    svc.store.upsertMemories(rows);
  },
  async row(svc, id) {
    const db = new Database(svc.settings.embeddedDb, { readonly: true });
    try {
      return db.prepare('SELECT usefulness, inclusions FROM memories WHERE id = ?').get(id) as
        | { usefulness: number; inclusions: number }
        | undefined;
    } finally {
      db.close();
    }
  },
  async cleanup() {},
};

const postgres: Backend = {
  env: () => ({
    IBEX_CONTEXT_POSTGRES_URL: PG_TEST_URL,
    IBEX_CONTEXT_POSTGRES_SCHEMA: schema,
    IBEX_CONTEXT_POSTGRES_POOL_MAX: '4',
    IBEX_CONTEXT_POSTGRES_POOL_MIN: '1',
    IBEX_CONTEXT_POSTGRES_STATEMENT_TIMEOUT_MS: '2000',
  }),
  async seed(svc, rows) {
    await (svc.service.sources.feedback as PgStore).upsertMemories(rows);
  },
  async row(_svc, id) {
    const rows = await adminQuery<{ usefulness: number; inclusions: number }>(
      `SELECT usefulness, inclusions FROM ${schema}.memories WHERE id = $1`,
      [id],
    );
    return rows[0];
  },
  cleanup: () => dropSchema(schema),
};

/** The value of a counter series (summed over its labels matching `labels`) from the service's registry. */
async function counter(
  svc: e2e.TestService,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const metric = svc.service.metrics.registry.getSingleMetric(name);
  if (!metric) return 0;
  const { values } = await metric.get();
  return values
    .filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
    .reduce((sum, v) => sum + v.value, 0);
}

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
}

function suite(backend: Backend): void {
  let svc: e2e.TestService;
  const own = e2e.memories(A.org, A.agent, 6, 'sailing');
  const foreign = e2e.memories(B.org, B.agent, 3, 'sailing');
  const unknown = randomUUID();
  beforeAll(async () => {
    svc = await e2e.startTestService(
      {
        ...backend.env(),
        IBEX_CONTEXT_INCLUSION_FLUSH_MS: '50',
        IBEX_CONTEXT_TIMEOUT: '3000',
        IBEX_CONTEXT_DEADLINE_MS: '1500',
        IBEX_CONTEXT_HOT_TIMEOUT_MS: '1500',
        IBEX_CONTEXT_COLD_TIMEOUT_MS: '1500',
        IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '1500',
      },
      { interceptors: [bearerAuthInterceptor(parseTokenFile(TOKENS), createLogger({ logLevel: 'silent' }))] },
    );
    await backend.seed(svc, [...own, ...foreign]);
  }, 60_000);
  afterAll(async () => {
    await svc?.stop();
    await backend.cleanup();
  });

  it('moves usefulness by the fixed step, clamped to [0, 1], and stores it at once', async () => {
    const id = own[0]!.id;
    const steps: [string, number, number][] = [
      ['helpful', 0.5, 0.6],
      ['helpful', 0.6, 0.7],
      ['not_helpful', 0.7, 0.6],
      ['harmful', 0.6, 0.5],
    ];
    for (const [feedback, previous, next] of steps) {
      const r = await svc.client.recordMemoryFeedback({ org_id: A.org, memory_ids: [id], feedback }, ops);
      expect(r.status.code).toBe(status.OK);
      expect(r.response!.success).toBe(true);
      expect(r.response!.updates).toHaveLength(1);
      const u = r.response!.updates[0]!;
      expect(u.memory_id).toBe(id);
      expect(u.previous_score).toBeCloseTo(previous, 6);
      expect(u.new_score).toBeCloseTo(next, 6);
      expect((await backend.row(svc, id))!.usefulness).toBeCloseTo(next, 12);
    }
    const other = own[1]!.id;
    let last = 0;
    for (let i = 0; i < 7; i++) {
      const r = await svc.client.recordMemoryFeedback(
        { org_id: A.org, memory_ids: [other], feedback: 'helpful' },
        ops,
      );
      last = r.response!.updates[0]!.new_score;
    }
    expect(last).toBe(1);
    expect((await backend.row(svc, other))!.usefulness).toBe(1);
  });

  it('applies every step of concurrent feedback naming the same memories in any order', async () => {
    const [x, y] = [own[4]!.id, own[5]!.id];
    const calls = [
      [x, y],
      [y, x],
      [x, y],
      [y, x],
    ].map((ids) =>
      svc.client.recordMemoryFeedback({ org_id: A.org, memory_ids: ids, feedback: 'helpful' }, ops),
    );
    for (const r of await Promise.all(calls)) expect(r.status.code).toBe(status.OK);
    expect((await backend.row(svc, x))!.usefulness).toBeCloseTo(0.9, 12);
    expect((await backend.row(svc, y))!.usefulness).toBeCloseTo(0.9, 12);
  });

  it("ignores and counts another org's and unknown ids, never naming them", async () => {
    const before = await counter(svc, 'ibex_context_feedback_ignored_ids_total');
    const mine = own[2]!.id;
    const theirs = foreign[0]!.id;
    const r = await svc.client.recordMemoryFeedback(
      // Upper case and repeated: canonicalised, counted once.
      { org_id: A.org, memory_ids: [theirs, unknown, mine.toUpperCase(), mine], feedback: 'harmful' },
      ops,
    );
    expect(r.status.code).toBe(status.OK);
    expect(r.response!.success).toBe(true);
    expect(r.response!.updates.map((u) => [u.memory_id, u.previous_score, u.new_score])).toEqual([
      [mine, 0.5, expect.closeTo(0.4, 6)],
    ]);
    expect(await backend.row(svc, theirs)).toEqual({ usefulness: 0.5, inclusions: 0 });
    expect(await backend.row(svc, unknown)).toBeUndefined();
    expect(await counter(svc, 'ibex_context_feedback_ignored_ids_total')).toBe(before + 2);
    // The other org's own feedback on the same ids moves only its memory.
    const b = await svc.client.recordMemoryFeedback(
      { org_id: B.org, memory_ids: [theirs, mine], feedback: 'helpful' },
      ops,
    );
    expect(b.response!.updates.map((u) => u.memory_id)).toEqual([theirs]);
    expect((await backend.row(svc, mine))!.usefulness).toBeCloseTo(0.4, 12);
  });

  it("refuses a token of one org acting for another's memories, writing nothing", async () => {
    const theirs = foreign[1]!.id;
    const r = await svc.client.recordMemoryFeedback(
      { org_id: B.org, memory_ids: [theirs], feedback: 'helpful' },
      bearer(TOKEN_A),
    );
    expect(r.status.code).toBe(status.PERMISSION_DENIED);
    expect(r.status.details).toBe(`caller 'org-a' may not act for org_id ${B.org}`);
    expect((await backend.row(svc, theirs))!.usefulness).toBe(0.5);
    const s = await svc.client.searchMemories(
      { org_id: B.org, agent_id: B.agent, query: 'sailing' },
      bearer(TOKEN_A),
    );
    expect(s.status.code).toBe(status.PERMISSION_DENIED);
    // Its own org is fine.
    const own0 = await svc.client.recordMemoryFeedback(
      { org_id: A.org, memory_ids: [own[3]!.id], feedback: 'helpful' },
      bearer(TOKEN_A),
    );
    expect(own0.status.code).toBe(status.OK);
  });

  it('answers INVALID_ARGUMENT naming the field for bad feedback requests', async () => {
    const ok = { org_id: A.org, memory_ids: [own[0]!.id], feedback: 'helpful' };
    const cases: [Record<string, unknown>, string][] = [
      [{ ...ok, org_id: '' }, 'org_id is required'],
      [{ ...ok, org_id: 'nope' }, 'org_id must be a UUID'],
      [{ ...ok, memory_ids: [] }, 'memory_ids is required'],
      [
        { ...ok, memory_ids: Array.from({ length: 101 }, () => randomUUID()) },
        'memory_ids exceeds 100 items',
      ],
      [{ ...ok, memory_ids: [own[0]!.id, 'x'] }, 'memory_ids[1] must be a UUID'],
      [{ ...ok, feedback: 'great' }, 'feedback must be one of helpful, not_helpful, harmful'],
      [{ ...ok, feedback: '' }, 'feedback must be one of helpful, not_helpful, harmful'],
    ];
    for (const [req, details] of cases) {
      const r = await svc.client.recordMemoryFeedback(req, ops);
      expect([r.status.code, r.status.details]).toEqual([status.INVALID_ARGUMENT, details]);
    }
  });

  it('answers INVALID_ARGUMENT naming the field for bad search requests', async () => {
    const ok = { org_id: A.org, agent_id: A.agent, query: 'sailing' };
    const cases: [Record<string, unknown>, string][] = [
      [{ ...ok, org_id: 'x' }, 'org_id must be a UUID'],
      [{ ...ok, agent_id: '' }, 'agent_id is required'],
      [{ ...ok, query: '  ' }, 'query is required'],
      [{ ...ok, query: 'q'.repeat(8193) }, 'query exceeds 8192 characters'],
      [{ ...ok, limit: 101 }, 'limit must be in 0..100, got 101'],
      [{ ...ok, limit: -1 }, 'limit must be in 0..100, got -1'],
      [{ ...ok, min_similarity: 1 }, 'min_similarity must be in [0, 1), got 1'],
      [{ ...ok, categories: Array.from({ length: 101 }, () => 'c') }, 'categories exceeds 100 items'],
      [{ ...ok, tags: ['t'] }, 'tags is not supported: memories carry no tags'],
    ];
    for (const [req, details] of cases) {
      const r = await svc.client.searchMemories(req, ops);
      expect([r.status.code, r.status.details]).toEqual([status.INVALID_ARGUMENT, details]);
    }
  });

  it("searches the caller's org and agent only, with filters and the limit", async () => {
    const r = await svc.client.searchMemories(
      { org_id: A.org, agent_id: A.agent, query: 'sailing lake' },
      ops,
    );
    expect(r.status.code).toBe(status.OK);
    const res = r.response!;
    const ownIds = new Set(own.map((m) => m.id));
    expect(res.memories.length).toBe(6);
    expect(res.total_candidates).toBe(6);
    const scores = res.memories.map((m) => m.composite_score);
    expect(scores).toEqual([...scores].sort((x, y) => y - x));
    for (const m of res.memories) {
      expect(ownIds.has(m.id)).toBe(true);
      const row = own.find((o) => o.id === m.id)!;
      expect(m.content).toBe(row.content);
      expect(m.category).toBe(row.category);
      expect(m.confidence).toBeCloseTo(row.confidence, 6);
      expect(m.created_at).toBe(new Date(row.created_at).toISOString());
      expect(m.composite_score).toBeGreaterThan(0);
      expect(m.composite_score).toBeLessThanOrEqual(1);
    }
    const limited = await svc.client.searchMemories(
      { org_id: A.org, agent_id: A.agent, query: 'sailing', limit: 2 },
      ops,
    );
    expect(limited.response!.memories.map((m) => m.id)).toEqual(res.memories.slice(0, 2).map((m) => m.id));
    expect(limited.response!.total_candidates).toBe(6);
    const cat = await svc.client.searchMemories(
      { org_id: A.org, agent_id: A.agent, query: 'sailing', categories: ['factual', 'episodic'] },
      ops,
    );
    expect(cat.response!.memories.map((m) => m.category).sort()).toEqual(['episodic', 'factual']);
    const none = await svc.client.searchMemories(
      { org_id: A.org, agent_id: A.agent, query: 'sailing', min_similarity: 0.999 },
      ops,
    );
    expect([none.response!.memories.length, none.response!.total_candidates]).toEqual([0, 0]);
    // Same agent id in org B: only B's memories.
    const b = await svc.client.searchMemories({ org_id: B.org, agent_id: B.agent, query: 'sailing' }, ops);
    expect(b.response!.memories.map((m) => m.id).sort()).toEqual(foreign.map((m) => m.id).sort());
  });

  it('counts every included memory toward retrieval_count, and the composite reads usefulness', async () => {
    const t = e2e.tenant();
    const rows = e2e.memories(t.org, t.agent, 4, 'harbour');
    await backend.seed(svc, rows);
    const calls = 3;
    let included: string[] = [];
    for (let i = 0; i < calls; i++) {
      const r = await svc.client.assemble(e2e.request(t, { query: 'harbour' }), { deadlineMs: 5000, ...ops });
      expect(r.status.code).toBe(status.OK);
      expect(r.response!.degradation.level).toBe('L0');
      included = r.response!.memories_used.filter((m) => m.exclusion === 'included').map((m) => m.memory_id);
    }
    expect(included.sort()).toEqual(rows.map((m) => m.id).sort());
    const search = () =>
      svc.client.searchMemories({ org_id: t.org, agent_id: t.agent, query: 'harbour' }, ops);
    const counted = await until(search, (s) =>
      s.response!.memories.every((m) => m.retrieval_count === calls),
    );
    expect(counted.response!.memories.map((m) => m.retrieval_count)).toEqual([calls, calls, calls, calls]);
    for (const m of rows) expect((await backend.row(svc, m.id))!.inclusions).toBe(calls);
    expect(await counter(svc, 'ibex_context_inclusions_total', { event: 'flushed' })).toBeGreaterThanOrEqual(
      calls * 4,
    );

    // Usefulness alone as the weight: each memory's composite is its stored usefulness.
    const liked = rows[2]!.id;
    await svc.client.recordMemoryFeedback({ org_id: t.org, memory_ids: [liked], feedback: 'helpful' }, ops);
    const r = await svc.client.assemble(
      e2e.request(t, { query: 'harbour', options: { usefulness_weight: 1 } }),
      {
        deadlineMs: 5000,
        ...ops,
      },
    );
    const scores = Object.fromEntries(r.response!.memories_used.map((m) => [m.memory_id, m.composite_score]));
    for (const m of rows) expect(scores[m.id]).toBeCloseTo(m.id === liked ? 0.6 : 0.5, 6);
  });
}

describe('memory RPCs on the embedded store', () => suite(embedded));
describePg('memory RPCs on PostgreSQL', reachable, () => suite(postgres));

describe('memory RPCs in front of a memory service', () => {
  const t = e2e.tenant();
  let svc: e2e.TestService;
  let close: () => Promise<void>;
  beforeAll(async () => {
    const fixture = await startMemoryFixture(e2e.memories(t.org, t.agent, 5), { token: 'mem-token' });
    close = fixture.close;
    svc = await e2e.startTestService({ ...fixture.env, IBEX_CONTEXT_COLD_TIMEOUT_MS: '1500' });
  }, 60_000);
  afterAll(async () => {
    await svc?.stop();
    await close?.();
  });

  it('answers both calls UNIMPLEMENTED: the memory service has no such operations', async () => {
    const s = await svc.client.searchMemories({
      org_id: t.org,
      agent_id: t.agent,
      query: 'sailing',
      limit: 3,
    });
    expect([s.status.code, s.status.details]).toEqual([
      status.UNIMPLEMENTED,
      'SearchMemories deferred \u2014 ADR-0038',
    ]);
    const f = await svc.client.recordMemoryFeedback({
      org_id: t.org,
      memory_ids: [randomUUID()],
      feedback: 'helpful',
    });
    expect([f.status.code, f.status.details]).toEqual([
      status.UNIMPLEMENTED,
      'RecordMemoryFeedback deferred \u2014 ADR-0038',
    ]);
  });
});
