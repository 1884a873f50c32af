import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadSettings } from '../../../src/config/settings.js';
import { retrieve } from '../../../src/retrieval/retrieve.js';
import { createSources } from '../../../src/retrieval/sources.js';
import { AGENT_TEXT_MAX_CHARS } from '../../../src/retrieval/sqlite/agent-bm25.js';
import { bm25ToSimilarity, EmbeddedStore } from '../../../src/retrieval/sqlite/embedded-store.js';
import { validateHits } from '../../../src/retrieval/validate.js';
import { contentText } from '../../../src/text/content-bytes.js';
import { embeddedSources, memoriesOf, memoryRow, useTempStore } from '../fixtures.js';

const ORG = randomUUID();
const OTHER_ORG = randomUUID();
const AGENT = randomUUID();
const OTHER_AGENT = randomUUID();

const fx = useTempStore();

describe('EmbeddedStore (contract.md §4.3)', () => {
  it('creates the parent directory and uses WAL', () => {
    expect(fs.existsSync(fx.file)).toBe(true);
    fx.store.upsertMemories(memoriesOf(ORG, AGENT, 1));
    expect(fs.existsSync(`${fx.file}-wal`)).toBe(true);
  });

  it('hot: newest first, then confidence, limit 20, rank = position, similarity = confidence', () => {
    const rows = memoriesOf(ORG, AGENT, 25);
    // Two rows with the same timestamp: the more confident one comes first.
    rows.push({ ...rows[24]!, id: randomUUID(), confidence: 0.99, content: 'tie winner' });
    fx.store.upsertMemories(rows);
    const hits = fx.store.hot(ORG, AGENT);
    expect(hits).toHaveLength(20);
    expect(hits.map((h) => h.rank)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(hits[0]!.memory.content).toBe('tie winner');
    expect(hits[1]!.memory.content).toBe('note memory 24 about baking');
    expect(hits[2]!.memory.content).toBe('note memory 23 about chess');
    for (const h of hits) {
      expect(h.similarity).toBe(h.memory.confidence);
      expect(h.source).toBe('hot');
    }
    expect(hits[1]!.memory.created_at).toBe(new Date(Date.UTC(2024, 0, 1) + 24 * 60_000).toISOString());
  });

  it('scopes hot and search by org AND agent', () => {
    fx.store.upsertMemories([
      ...memoriesOf(ORG, AGENT, 3, 'mine'),
      ...memoriesOf(OTHER_ORG, AGENT, 3, 'otherorg'),
      ...memoriesOf(ORG, OTHER_AGENT, 3, 'otheragent'),
    ]);
    const hot = fx.store.hot(ORG, AGENT);
    expect(hot.map((h) => h.memory.content!.split(' ')[0])).toEqual(['mine', 'mine', 'mine']);
    const found = fx.store.search(ORG, AGENT, 'memory about gardening painting sailing');
    expect(found.length).toBe(3);
    for (const h of found) {
      expect(h.memory.org_id).toBe(ORG);
      expect(h.memory.agent_id).toBe(AGENT);
    }
    // The memory wire carries no org: the agent's rows of every org, with their real org_id.
    const anyOrg = fx.store.hot(null, AGENT);
    expect(new Set(anyOrg.map((h) => h.memory.org_id))).toEqual(new Set([ORG, OTHER_ORG]));
    expect(fx.store.search(null, AGENT, 'memory').length).toBe(6);
    expect(fx.store.search(randomUUID(), AGENT, 'memory')).toEqual([]);
  });

  it('searchHits gives the retrieval branch exactly what validating the wire hits gives (neighbours, oversize, any org)', () => {
    const topics = [
      'sailing on the lake',
      'chess club',
      'How long have you been married?',
      'married for 5 years',
    ];
    const rows = Array.from({ length: 40 }, (_, i) =>
      memoryRow(ORG, AGENT, `${topics[i % topics.length]} <${i}> & "notes"`, i),
    );
    rows[7] = { ...rows[7]!, content: `sailing on the lake ${'long '.repeat(40)}` };
    rows[9] = { ...rows[9]!, category: 'episodic', confidence: 0.3 };
    fx.store.upsertMemories([...rows, memoryRow(OTHER_ORG, AGENT, 'sailing on the lake, another org', 3)]);
    fx.store.addInclusions([{ orgId: ORG, memoryId: rows[1]!.id, count: 4 }]);
    fx.store.recordFeedback(ORG, [rows[5]!.id], 'helpful');
    let compared = 0;
    for (const query of ['sailing lake', 'chess', 'How long married?', 'notes', 'nothing-matches-this']) {
      for (const neighbours of [0, 3]) {
        for (const org of [ORG, null]) {
          for (const maxChars of [undefined, 100]) {
            const opts = { neighbours, limit: 12, maxChars };
            const wire = validateHits(fx.store.search(org, AGENT, query, opts), org ?? ORG, AGENT, {
              limit: 12,
              maxChars: maxChars ?? Number.POSITIVE_INFINITY,
            });
            const direct = fx.store.searchHits(org, AGENT, query, opts);
            if (org === ORG) expect(direct).toEqual(wire);
            else {
              // The org-less (memory wire) read keeps the other org's row; validating against ORG drops it.
              expect(direct.hits.filter((h) => h.org_id === ORG)).toEqual(wire.hits);
              for (const h of direct.hits) expect(h.agent_id).toBe(AGENT);
            }
            compared += direct.hits.length;
          }
        }
      }
    }
    expect(compared).toBeGreaterThan(100);
    const capped = fx.store.searchHits(ORG, AGENT, 'sailing lake', { limit: 40, maxChars: 100 });
    expect(capped.oversize).toBe(1);
    expect(capped.hits.map((h) => h.memory_id)).not.toContain(rows[7]!.id);
    const counted = fx.store.searchHits(ORG, AGENT, 'sailing lake chess', { limit: 40 });
    expect(counted.hits.find((h) => h.memory_id === rows[1]!.id)?.inclusions).toBe(4);
    expect(counted.hits.find((h) => h.memory_id === rows[5]!.id)?.usefulness).toBeGreaterThan(0);
  });

  it('stems English words: a question about painting finds a memory about a painted fence', () => {
    fx.store.upsertMemories([
      memoryRow(ORG, AGENT, 'Ann painted the garden fence blue'),
      memoryRow(ORG, AGENT, 'Ann likes tea'),
    ]);
    const found = fx.store.search(ORG, AGENT, 'what was she painting?');
    expect(found.map((h) => h.memory.content)).toEqual(['Ann painted the garden fence blue']);
  });

  it('an agent id ending in a stemmable suffix (`ed`) finds its rows without an org', () => {
    // Stemmed, a prefix query for `a…ed` would be `a…`, which also starts the sibling's scope token: the
    // sibling's better matches would take the search's top rows, and the agent's own row would be lost.
    const edAgent = '7b1c2d3e-4f50-4a61-8b72-9c8d7e6f50ed';
    const sibling = '7b1c2d3e-4f50-4a61-8b72-9c8d7e6f5000';
    fx.store.upsertMemories([
      memoryRow(ORG, edAgent, 'mine about sailing and more words here'),
      ...Array.from({ length: 30 }, (_, i) => memoryRow(ORG, sibling, 'sailing sailing sailing', i)),
    ]);
    expect(fx.store.search(null, edAgent, 'sailing').map((h) => h.memory.content)).toEqual([
      'mine about sailing and more words here',
    ]);
  });

  it('search: BM25 similarity in [0,1], best first, rank = position, source fts', () => {
    fx.store.upsertMemories([
      ...memoriesOf(ORG, AGENT, 10),
      { ...memoriesOf(ORG, AGENT, 1)[0]!, id: randomUUID(), content: 'zeppelin zeppelin zeppelin ride' },
      {
        ...memoriesOf(ORG, AGENT, 1)[0]!,
        id: randomUUID(),
        content: 'a long note that mentions a zeppelin once among many other words here',
      },
    ]);
    const hits = fx.store.search(ORG, AGENT, 'Zeppelin!');
    expect(hits.map((h) => h.memory.content!.slice(0, 8))).toEqual(['zeppelin', 'a long n']);
    expect(hits.map((h) => h.rank)).toEqual([1, 2]);
    expect(hits.every((h) => h.source === 'fts')).toBe(true);
    expect(hits[0]!.similarity).toBeGreaterThan(hits[1]!.similarity);
    for (const h of hits) {
      expect(h.similarity).toBeGreaterThan(0);
      expect(h.similarity).toBeLessThan(1);
    }
    const broad = fx.store.search(ORG, AGENT, 'memory about chess or baking');
    expect(broad.length).toBe(10);
    for (let i = 1; i < broad.length; i++)
      expect(broad[i - 1]!.similarity).toBeGreaterThanOrEqual(broad[i]!.similarity);
  });

  it("ranks by BM25 over the agent's own rows: a word in most of them weighs little, whatever other agents hold", () => {
    const row = (org: string, agent: string, content: string) => ({
      ...memoriesOf(org, agent, 1)[0]!,
      id: randomUUID(),
      content,
    });
    const pottery = 'Melanie: my pottery class made a blue bowl';
    fx.store.upsertMemories([
      ...Array.from({ length: 10 }, (_, i) =>
        row(ORG, AGENT, `Caroline: we talked about the weather on day ${i}`),
      ),
      row(ORG, AGENT, pottery),
      // Another tenant full of pottery and without Caroline: over the whole table, "caroline" is the rare word.
      ...Array.from({ length: 40 }, (_, i) => row(OTHER_ORG, OTHER_AGENT, `pottery wheel note ${i}`)),
    ]);
    const question = 'What did Caroline say about pottery?';
    const hits = fx.store.search(ORG, AGENT, question);
    // The search's default limit of 10, the pottery memory first.
    expect(hits).toHaveLength(10);
    expect(hits[0]!.memory.content).toBe(pottery);
    // One tenant's text never weighs another's search: the same ranking and scores with the other one gone.
    fx.store.replaceAgent(OTHER_ORG, OTHER_AGENT, []);
    const alone = fx.store.search(ORG, AGENT, question);
    expect(alone.map((h) => [h.memory.id, h.similarity])).toEqual(
      hits.map((h) => [h.memory.id, h.similarity]),
    );
  });

  it("another connection's write is ranked at once: the agent's statistics follow every commit", () => {
    fx.store.upsertMemories(memoriesOf(ORG, AGENT, 5));
    expect(fx.store.search(ORG, AGENT, 'zeppelin')).toHaveLength(0);
    const before = fx.store.search(ORG, AGENT, 'memory about chess');
    const other = EmbeddedStore.open(fx.file, { cache: false });
    try {
      other.upsertMemories([
        { ...memoriesOf(ORG, AGENT, 1)[0]!, id: randomUUID(), content: 'a zeppelin ride' },
      ]);
    } finally {
      other.close();
    }
    expect(fx.store.search(ORG, AGENT, 'zeppelin').map((h) => h.memory.content)).toEqual(['a zeppelin ride']);
    // Six rows now: the same matches score differently (idf over N = 6, not 5).
    const after = fx.store.search(ORG, AGENT, 'memory about chess');
    expect(after.map((h) => h.memory.id)).toEqual(before.map((h) => h.memory.id));
    expect(after[0]!.similarity).not.toBe(before[0]!.similarity);
  });

  it("a search's hits are the rows as stored now, whether the agent's rows are kept in memory or read by key", () => {
    // Over the kept-text bound, the big agent's hits are read by key; the small one's come from memory.
    const bigAgent = randomUUID();
    const perRow = 60_000;
    const bigRows = Array.from({ length: Math.ceil(AGENT_TEXT_MAX_CHARS / perRow) + 1 }, (_, i) =>
      memoryRow(ORG, bigAgent, `sailing log ${i} ${'x'.repeat(perRow)}`, i),
    );
    const smallRows = Array.from({ length: 12 }, (_, i) =>
      memoryRow(ORG, AGENT, `sailing log ${i} short`, i),
    );
    fx.store.upsertMemories([...bigRows, ...smallRows]);
    const direct = new Database(fx.file, { readonly: true });
    const stored = direct.prepare<[string], Record<string, unknown>>('SELECT * FROM memories WHERE id = ?');
    const expectStored = (agent: string, maxChars?: number) => {
      const found = fx.store.searchHits(ORG, agent, 'sailing log', { limit: 600, maxChars });
      expect(found.hits.length + found.oversize).toBeGreaterThan(10);
      for (const h of found.hits) {
        const row = stored.get(h.memory_id)!;
        expect([h.org_id, h.agent_id, contentText(h.content), h.category, h.confidence]).toEqual([
          row.org_id,
          row.agent_id,
          row.content,
          row.category,
          row.confidence,
        ]);
        expect([h.created_at_ms, h.usefulness, h.inclusions]).toEqual([
          row.created_at,
          row.usefulness,
          row.inclusions,
        ]);
      }
      return found;
    };
    try {
      for (const agent of [AGENT, bigAgent]) expectStored(agent);
      expect(expectStored(bigAgent, 1_000).oversize).toBe(bigRows.length);
      expect(expectStored(AGENT, 1_000).oversize).toBe(0);
      // This connection's inclusion counts, another connection's feedback and content: seen by the next search.
      fx.store.addInclusions([
        { orgId: ORG, memoryId: smallRows[2]!.id, count: 4 },
        { orgId: ORG, memoryId: bigRows[2]!.id, count: 5 },
      ]);
      const other = EmbeddedStore.open(fx.file, { cache: false });
      try {
        other.recordFeedback(ORG, [smallRows[3]!.id, bigRows[3]!.id], 'helpful');
        other.upsertMemories([{ ...smallRows[4]!, content: 'sailing log rewritten' }]);
      } finally {
        other.close();
      }
      const small = expectStored(AGENT);
      expect(small.hits.find((h) => h.memory_id === smallRows[2]!.id)?.inclusions).toBe(4);
      expect(small.hits.find((h) => h.memory_id === smallRows[3]!.id)?.usefulness).toBeGreaterThan(0.5);
      expect(contentText(small.hits.find((h) => h.memory_id === smallRows[4]!.id)!.content)).toBe(
        'sailing log rewritten',
      );
      const big = expectStored(bigAgent);
      expect(big.hits.find((h) => h.memory_id === bigRows[2]!.id)?.inclusions).toBe(5);
      expect(big.hits.find((h) => h.memory_id === bigRows[3]!.id)?.usefulness).toBeGreaterThan(0.5);
    } finally {
      direct.close();
    }
  });

  it('maps bm25 into [0,1) with s = x/(1+x), x = -bm25', () => {
    expect(bm25ToSimilarity(-1)).toBe(0.5);
    expect(bm25ToSimilarity(-3)).toBe(0.75);
    expect(bm25ToSimilarity(0)).toBe(0);
    expect(bm25ToSimilarity(2)).toBe(0);
    expect(bm25ToSimilarity(Number.NaN)).toBe(0);
  });

  it.each([
    '"',
    '"unbalanced',
    '*',
    'garden*',
    'NEAR(',
    'NEAR(gardening painting, 2)',
    'OR',
    'AND OR NOT',
    'content:gardening',
    '^gardening',
    '(gardening',
    '😀🎉',
    'lone \uD800 surrogate \uDFFF',
    '\u0000\u0001',
    '-- DROP TABLE memories; --',
    "'; SELECT 1; --",
  ])('hostile query %j never throws', (q) => {
    fx.store.upsertMemories(memoriesOf(ORG, AGENT, 5));
    const hits = fx.store.search(ORG, AGENT, q);
    expect(Array.isArray(hits)).toBe(true);
    for (const h of hits) expect(h.memory.agent_id).toBe(AGENT);
  });

  it('hostile text still finds its real words', () => {
    fx.store.upsertMemories(memoriesOf(ORG, AGENT, 5));
    const hits = fx.store.search(ORG, AGENT, '"NEAR(gardening* OR 😀');
    expect(hits.map((h) => h.memory.content)).toEqual(['note memory 0 about gardening']);
  });

  it('any unicode text is a safe query (property)', () => {
    fx.store.upsertMemories(memoriesOf(ORG, AGENT, 5));
    fc.assert(
      fc.property(
        fc.string({
          unit: fc.oneof(
            fc.constantFrom('"', '*', '(', ')', ':', '^', ' ', 'NEAR', 'OR'),
            fc.string({ unit: 'binary' }),
          ),
        }),
        (q) => {
          const hits = fx.store.search(ORG, AGENT, q);
          return hits.every((h) => h.similarity >= 0 && h.similarity <= 1 && h.memory.agent_id === AGENT);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('upsert replaces content and the FTS index follows', () => {
    const [row] = memoriesOf(ORG, AGENT, 1);
    fx.store.upsertMemories([row!]);
    expect(fx.store.search(ORG, AGENT, 'gardening')).toHaveLength(1);
    fx.store.upsertMemories([{ ...row!, content: 'now about kayaking' }]);
    expect(fx.store.search(ORG, AGENT, 'gardening')).toHaveLength(0);
    expect(fx.store.search(ORG, AGENT, 'kayaking')[0]!.memory.id).toBe(row!.id);
    expect(fx.store.counts()).toEqual({ memories: 1, directives: 0, agents: 1 });
  });

  it('replaceAgent swaps one agent atomically and leaves others alone', () => {
    fx.store.upsertMemories([
      ...memoriesOf(ORG, AGENT, 4, 'old'),
      ...memoriesOf(ORG, OTHER_AGENT, 2, 'keep'),
    ]);
    fx.store.replaceAgent(ORG, AGENT, memoriesOf(ORG, AGENT, 2, 'new'));
    expect(fx.store.hot(ORG, AGENT).map((h) => h.memory.content!.split(' ')[0])).toEqual(['new', 'new']);
    expect(fx.store.search(ORG, AGENT, 'old')).toEqual([]);
    expect(fx.store.hot(ORG, OTHER_AGENT)).toHaveLength(2);
    expect(() => fx.store.replaceAgent(ORG, AGENT, memoriesOf(ORG, OTHER_AGENT, 1))).toThrow(/is not of org/);
    expect(fx.store.hot(ORG, AGENT)).toHaveLength(2);
  });

  it('rejects invalid writes without writing anything', () => {
    const rows = memoriesOf(ORG, AGENT, 2);
    expect(() => fx.store.upsertMemories([rows[0]!, { ...rows[1]!, confidence: 1.5 }])).toThrow(
      'confidence must be in [0,1]',
    );
    expect(() => fx.store.upsertMemories([{ ...rows[1]!, id: 'x' }])).toThrow('id must be a UUID');
    expect(fx.store.counts().memories).toBe(0);
    expect(() => fx.store.hot(ORG, 'nope')).toThrow('agent_id must be a UUID');
  });

  it('directives round-trip, null content included', () => {
    const version = randomUUID();
    fx.store.setDirective({
      org_id: ORG,
      agent_id: AGENT,
      content: 'Be kind.',
      injection_mode: 'user_prepend',
      version_id: version,
    });
    expect(fx.store.getDirective(ORG, AGENT)).toEqual({
      v: 1,
      content: 'Be kind.',
      injection_mode: 'user_prepend',
      version_id: version,
    });
    fx.store.setDirective({
      org_id: ORG,
      agent_id: AGENT,
      content: null,
      injection_mode: '',
      version_id: version,
    });
    expect(fx.store.getDirective(ORG, AGENT)?.content).toBeNull();
    expect(fx.store.getDirective(OTHER_ORG, AGENT)).toBeNull();
    expect(fx.store.deleteDirective(ORG, AGENT)).toBe(true);
    expect(fx.store.getDirective(ORG, AGENT)).toBeNull();
  });
});

describe('embedded sources through retrieve (contract.md §4.3)', () => {
  const t = { wallMs: 200, directiveMs: 100, hotMs: 100, coldMs: 100 };
  const req = { orgId: ORG, agentId: AGENT, query: 'painting', skipHot: false, skipCold: false };

  it('serves directive, hot and cold with the same validation and scoping', async () => {
    fx.store.close();
    const sources = await createSources(loadSettings({ IBEX_CONTEXT_EMBEDDED_DB: fx.file }));
    try {
      expect(sources.kind).toEqual({ memory: 'embedded', directive: 'embedded' });
      // A second handle on the same file, as `ingest` would be.
      fx.reopen();
      const version = randomUUID();
      fx.store.upsertMemories([...memoriesOf(ORG, AGENT, 6), ...memoriesOf(OTHER_ORG, AGENT, 6)]);
      fx.store.setDirective({
        org_id: ORG,
        agent_id: AGENT,
        content: 'Answer briefly.',
        injection_mode: 'weird',
        version_id: version,
      });
      const r = await retrieve(sources, req, t, new AbortController().signal);
      expect(r.directive).toEqual({
        content: 'Answer briefly.',
        injection_mode: 'system_first',
        version_id: version,
      });
      expect(r.hot).toHaveLength(6);
      expect(r.hot.every((h) => h.org_id === ORG && h.agent_id === AGENT)).toBe(true);
      // The hit, then its dialogue neighbour (the next memory of its category: retrieval/neighbours.ts),
      // read in the request's org: the other org's rows of the same agent and times never come back.
      expect(r.cold.map((h) => contentText(h.content))).toEqual([
        'note memory 1 about painting',
        'note memory 3 about chess',
      ]);
      expect(r.cold.every((h) => h.org_id === ORG && h.agent_id === AGENT)).toBe(true);
      expect(r.cold[0]!.source).toBe('fts');
      expect(r.branches.map((b) => [b.name, b.status, b.detail])).toEqual([
        ['directive', 'success', ''],
        ['hot', 'success', ''],
        ['cold', 'success', ''],
      ]);
      expect(r.dropped).toEqual({ invalid: 0, foreign: 0 });
    } finally {
      await sources.close();
    }
  });

  it('a bad stored directive is a branch error; memories are unaffected', async () => {
    fx.store.upsertMemories(memoriesOf(ORG, AGENT, 2));
    fx.store.setDirective({
      org_id: ORG,
      agent_id: AGENT,
      content: 'x',
      injection_mode: '',
      version_id: 'not-a-uuid',
    });
    const sources = embeddedSources(fx.store);
    const r = await retrieve(sources, req, t, new AbortController().signal);
    expect(r.directive).toBeNull();
    expect(r.branches[0]).toMatchObject({
      status: 'error',
      detail: 'bad directive: version_id must be a UUID',
    });
    expect(r.hot).toHaveLength(2);
  });

  it('a closed store is a branch error, never a throw', async () => {
    const sources = embeddedSources(fx.store);
    fx.store.close();
    const r = await retrieve(sources, req, t, new AbortController().signal);
    expect(r.branches.map((b) => b.status)).toEqual(['error', 'error', 'error']);
    expect(r.branches[1]!.detail).toMatch(/^embedded store unavailable/);
  });
});

describe('EmbeddedStore.warmTenants (start-up warm-up)', () => {
  it('lists the most recently written agents, newest first, with queries made of their own memories', () => {
    fx.store.upsertMemories(memoriesOf(ORG, AGENT, 3, 'older'));
    fx.store.upsertMemories(memoriesOf(OTHER_ORG, OTHER_AGENT, 12, 'newer'));
    const tenants = fx.store.warmTenants(5, 4);
    expect(tenants.map((t) => [t.orgId, t.agentId])).toEqual([
      [OTHER_ORG, OTHER_AGENT],
      [ORG, AGENT],
    ]);
    expect(tenants[0]!.queries).toEqual([
      'newer memory 11 about painting',
      'newer memory 10 about gardening',
      // Words of one character are left out: they match too much to be a question's terms.
      'newer memory about baking',
      'newer memory about chess',
    ]);
    expect(tenants[1]!.queries).toHaveLength(3);
    expect(fx.store.warmTenants(1, 2)).toHaveLength(1);
  });
});
