/**
 * PostgreSQL store against the real server at PG_URL, in a schema of its own dropped after:
 * hit shape, org/agent scoping, limits and the size cap, CJK words inside longer runs, user text never
 * syntax (fast-check), directives, and migrations run by two processes at once.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import fc from 'fast-check';
import { Client as PgClient } from 'pg';
import { describe, expect, it } from 'vitest';
import { loadSettings } from '../../../src/config/settings.js';
import { ANSWER_DISCOUNT, PREVIOUS_DISCOUNT } from '../../../src/retrieval/neighbours.js';
import { MIGRATIONS, migrate } from '../../../src/retrieval/postgres/migrations.js';
import { PgDirectiveSource } from '../../../src/retrieval/postgres/pg-sources.js';
import { PgStore } from '../../../src/retrieval/postgres/pg-store.js';
import { indexText, toWebSearchQuery } from '../../../src/retrieval/postgres/search-text.js';
import { retrieve } from '../../../src/retrieval/retrieve.js';
import { createSources } from '../../../src/retrieval/sources.js';
import { type ValidatedHits, validateHits } from '../../../src/retrieval/validate.js';
import { contentText } from '../../../src/text/content-bytes.js';
import {
  adminQuery,
  describePg,
  dropSchema,
  PG_TEST_URL,
  pgSources,
  pgTestFile,
  testSchema,
  usePgStore,
} from '../../helpers/postgres.js';
import { memoriesOf } from '../fixtures.js';

const { reachable, schema, org: ORG, agent: AGENT } = await pgTestFile('store');
const OTHER_ORG = randomUUID();
const OTHER_AGENT = randomUUID();
const T = { timeoutMs: 2000 };

function memory(id: string, content: string, over: Partial<{ org: string; agent: string; at: number }> = {}) {
  return {
    id,
    org_id: over.org ?? ORG,
    agent_id: over.agent ?? AGENT,
    content,
    category: 'factual',
    confidence: 0.8,
    created_at: over.at ?? Date.UTC(2024, 5, 1),
  };
}

describe('IBEX_CONTEXT_POSTGRES_* settings', () => {
  it('defaults off, schema ibex_context, pool 8; a bad value names its variable', () => {
    expect(loadSettings({}).postgres).toEqual({
      url: '',
      schema: 'ibex_context',
      poolMax: 8,
      poolMin: 4,
      statementTimeoutMs: 100,
      transactionPooler: false,
      listenUrl: '',
    });
    const bad = (env: Record<string, string>, variable: string) =>
      expect(() => loadSettings(env)).toThrow(new RegExp(`^${variable}`));
    bad({ IBEX_CONTEXT_POSTGRES_URL: 'http://db:5432/x' }, 'IBEX_CONTEXT_POSTGRES_URL');
    bad({ IBEX_CONTEXT_POSTGRES_SCHEMA: 'Bad-Name' }, 'IBEX_CONTEXT_POSTGRES_SCHEMA');
    bad({ IBEX_CONTEXT_POSTGRES_POOL_MAX: '0' }, 'IBEX_CONTEXT_POSTGRES_POOL_MAX');
    bad({ IBEX_CONTEXT_POSTGRES_STATEMENT_TIMEOUT_MS: '0' }, 'IBEX_CONTEXT_POSTGRES_STATEMENT_TIMEOUT_MS');
    bad({ IBEX_CONTEXT_POSTGRES_LISTEN_URL: 'redis://x' }, 'IBEX_CONTEXT_POSTGRES_LISTEN_URL');
  });
});

describePg('PostgreSQL store', reachable, () => {
  const pg = usePgStore(schema, { poolMax: 4 });

  it('hot: newest first, limit 20, similarity = confidence, wire shape that validates', async () => {
    const agent = randomUUID();
    const rows = memoriesOf(ORG, agent, 25);
    await pg.store.replaceAgent(ORG, agent, rows);
    const hits = await pg.store.hot(ORG, agent, T);
    expect(hits).toHaveLength(20);
    expect(hits[0]).toEqual({
      memory: {
        id: rows[24]!.id,
        org_id: ORG,
        agent_id: agent,
        content: 'note memory 24 about baking',
        category: 'episodic',
        confidence: 0.9,
        created_at: new Date(rows[24]!.created_at).toISOString(),
        // Neutral and never included: the stored feedback score and inclusion count.
        usefulness: 0.5,
        retrieval_count: 0,
      },
      similarity: 0.9,
      rank: 1,
      source: 'hot',
    });
    expect(hits.map((h) => h.rank)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    const v = validateHits(hits, ORG, agent);
    expect(v).toMatchObject({ invalid: 0, foreign: 0 });
    expect(v.hits).toHaveLength(20);
  });

  it('warmTenants: a written agent is listed with queries made of its newest memories, words of 2+ letters', async () => {
    const org = randomUUID();
    const agent = randomUUID();
    await pg.store.upsertMemories([
      memory(randomUUID(), 'Caroline went to a support group on May 7', {
        org,
        agent,
        at: Date.UTC(2024, 4, 8),
      }),
      memory(randomUUID(), 'Melanie paints sunsets: "calming" & bright!', {
        org,
        agent,
        at: Date.UTC(2024, 4, 9),
      }),
      memory(randomUUID(), 'an older note', { org, agent, at: Date.UTC(2020, 0, 1) }),
    ]);
    const tenants = await pg.store.warmTenants(1000, 2);
    const mine = tenants.find((t) => t.orgId === org && t.agentId === agent);
    expect(mine?.queries).toEqual([
      'Melanie paints sunsets calming bright',
      'Caroline went to support group on May',
    ]);
    expect((await pg.store.warmTenants(1, 2)).length).toBe(1);
  });

  it('searchHits: the retrieval branch gets exactly what validating the wire hits gives, with and without neighbours', async () => {
    const org = randomUUID();
    const agent = randomUUID();
    const topics = [
      'sailing on the lake',
      'chess club',
      'How long have you been married?',
      'married for 5 years',
      // A full-width question mark and multi-byte text: the answer-after-a-question share on UTF-8 bytes.
      'Shall we go sailing on the lake again？ 🚤 été',
    ];
    await pg.store.upsertMemories([
      ...Array.from({ length: 30 }, (_, i) =>
        memory(randomUUID(), `${topics[i % topics.length]} <${i}> & "notes"`, {
          org,
          agent,
          at: Date.UTC(2024, 0, 1) + i * 60_000,
        }),
      ),
      memory(randomUUID(), 'sailing on the lake, another org', { org: OTHER_ORG, agent }),
    ]);
    const none = await pg.store.searchHits(org, agent, 'zeppelin', { ...T, neighbours: 3, limit: 12 });
    expect(none).toEqual({ hits: [], invalid: 0, foreign: 0, oversize: 0, ignored: 0 });
    for (const query of ['sailing lake', 'chess', 'How long married?', 'again']) {
      for (const neighbours of [0, 3]) {
        const opts = { ...T, neighbours, limit: 12 };
        const wire = validateHits(await pg.store.search(org, agent, query, opts), org, agent);
        const direct = await pg.store.searchHits(org, agent, query, opts);
        expect(direct.hits.length).toBeGreaterThan(0);
        // Contents arrive as UTF-8 bytes (one aggregated row), the rest field for field.
        for (const h of direct.hits) expect(h.content).toBeInstanceOf(Uint8Array);
        expect(direct.hits.map((h) => ({ ...h, content: contentText(h.content) }))).toEqual(wire.hits);
        expect(direct.foreign).toBe(0);
        // The stored time, to the ms (searches read it as epoch ms, not a timestamptz).
        for (const h of direct.hits) {
          const i = Number(/<(\d+)>/.exec(contentText(h.content) ?? '')?.[1]);
          expect(h.created_at_ms).toBe(Date.UTC(2024, 0, 1) + i * 60_000);
        }
      }
    }
  });

  it('scoping: another org’s or agent’s memory is never returned, by hot or by search', async () => {
    await pg.store.upsertMemories([
      memory(randomUUID(), 'shared secret about the lighthouse', { org: OTHER_ORG }),
      memory(randomUUID(), 'shared secret about the lighthouse', { agent: OTHER_AGENT }),
      memory(randomUUID(), 'own note about the lighthouse'),
    ]);
    const hot = await pg.store.hot(ORG, AGENT, T);
    const cold = await pg.store.search(ORG, AGENT, 'lighthouse secret', T);
    for (const h of [...hot, ...cold]) expect([h.memory.org_id, h.memory.agent_id]).toEqual([ORG, AGENT]);
    expect(cold.map((h) => h.memory.content)).toEqual(['own note about the lighthouse']);
    // The memory wire has no org: `null` reads the agent's memories of every org.
    const wire = await pg.store.search(null, OTHER_AGENT, 'lighthouse', T);
    expect(wire.map((h) => h.memory.agent_id)).toEqual([OTHER_AGENT]);
  });

  it('search with neighbours: the answer after a question hit and the turn before, in scope and category', async () => {
    const agent = randomUUID();
    const at = (i: number) => Date.UTC(2024, 5, 1) + i * 1000;
    const turn = (content: string, i: number, over: { org?: string; agent?: string } = {}) => ({
      ...memory(randomUUID(), content, { agent, at: at(i), ...over }),
      category: 'episodic',
    });
    await pg.store.replaceAgent(ORG, agent, [
      turn('Caroline: I went to a pottery class.', 0),
      turn('Melanie: How long have you been married?', 1),
      turn('Caroline: 5 years already!', 2),
      { ...turn('A summary of the session', 3), category: 'factual' },
    ]);
    await pg.store.upsertMemories([
      turn('secret of another org', 1.5, { org: OTHER_ORG }),
      turn('secret of another agent', 1.5, { agent: OTHER_AGENT }),
    ]);
    const plain = await pg.store.search(ORG, agent, 'How long married?', T);
    expect(plain.map((h) => h.memory.content)).toEqual(['Melanie: How long have you been married?']);
    const hits = await pg.store.search(ORG, agent, 'How long married?', { ...T, neighbours: 5 });
    expect(hits.map((h) => h.memory.content)).toEqual([
      'Melanie: How long have you been married?',
      'Caroline: 5 years already!',
      'Caroline: I went to a pottery class.',
    ]);
    expect(hits.map((h) => h.rank)).toEqual([1, 2, 3]);
    for (const h of hits) expect([h.memory.org_id, h.memory.agent_id]).toEqual([ORG, agent]);
    const x = (s: number) => s / (1 - s);
    expect(hits[0]!.similarity).toBeCloseTo(plain[0]!.similarity, 6);
    expect(x(hits[1]!.similarity)).toBeCloseTo(ANSWER_DISCOUNT * x(plain[0]!.similarity), 6);
    expect(x(hits[2]!.similarity)).toBeCloseTo(PREVIOUS_DISCOUNT * x(plain[0]!.similarity), 6);
    expect(
      await pg.store.search(ORG, agent, 'How long married?', { ...T, neighbours: 5, limit: 2 }),
    ).toHaveLength(2);
    expect(validateHits(hits, ORG, agent)).toMatchObject({ invalid: 0, foreign: 0 });
  });

  it('search: limit 10, best BM25 score first, both terms above one, similarity in [0,1)', async () => {
    const agent = randomUUID();
    const rows = Array.from({ length: 14 }, (_, i) =>
      memory(randomUUID(), `kayak trip number ${i}`, { agent }),
    );
    rows.push(memory(randomUUID(), 'the kayak we took across the lake', { agent }));
    rows.push(memory(randomUUID(), 'the and of it was', { agent }));
    await pg.store.replaceAgent(ORG, agent, rows);
    const hits = await pg.store.search(ORG, agent, 'Where is the KAYAK on the lake?', T);
    expect(hits).toHaveLength(10);
    expect(hits[0]!.memory.content).toBe('the kayak we took across the lake');
    const sims = hits.map((h) => h.similarity);
    expect([...sims].sort((a, b) => b - a)).toEqual(sims);
    for (const s of sims) expect(s > 0 && s < 1).toBe(true);
    expect(hits.every((h) => h.source === 'fts' && (h.memory.content ?? '').includes('kayak'))).toBe(true);
  });

  it('size cap: a memory longer than maxChars code points is filtered in SQL (emoji count as one)', async () => {
    const agent = randomUUID();
    const astral = '😀'.repeat(10); // 10 code points, 20 UTF-16 units
    await pg.store.replaceAgent(ORG, agent, [
      memory(randomUUID(), `${astral} zebra`, { agent, at: 1 }), // 16 code points
      memory(randomUUID(), `${astral} zebra!!`, { agent, at: 2 }), // 18 code points
    ]);
    const hot = await pg.store.hot(ORG, agent, { ...T, maxChars: 16 });
    expect(hot.map((h) => h.memory.content)).toEqual([`${astral} zebra`]);
    const cold = await pg.store.search(ORG, agent, 'zebra', { ...T, maxChars: 17 });
    expect(cold.map((h) => h.memory.content)).toEqual([`${astral} zebra`]);
    expect(await pg.store.hot(ORG, agent, { ...T, maxChars: 18 })).toHaveLength(2);
  });

  it('CJK: a word inside a longer run is found, and an ASCII word glued to CJK text', async () => {
    const agent = randomUUID();
    await pg.store.replaceAgent(ORG, agent, [
      memory(randomUUID(), '部署脚本build-kit运行', { agent }),
      memory(randomUUID(), '東京タワーに行きました', { agent }),
      memory(randomUUID(), '脚注の本', { agent }),
      memory(randomUUID(), '나는 학교에 갑니다', { agent }),
    ]);
    const found = async (q: string) =>
      (await pg.store.search(ORG, agent, q, T)).map((h) => h.memory.content).sort();
    expect(await found('脚本')).toEqual(['部署脚本build-kit运行']);
    expect(await found('kit')).toEqual(['部署脚本build-kit运行']);
    expect(await found('タワー')).toEqual(['東京タワーに行きました']);
    expect(await found('학교')).toEqual(['나는 학교에 갑니다']);
    expect(await found('本脚')).toEqual([]);
  });

  it('query text is never syntax: any string searches without a database error (fast-check)', async () => {
    const agent = randomUUID();
    await pg.store.replaceAgent(ORG, agent, [
      memory(randomUUID(), 'or and not "quoted" -minus (paren) ! & | <->', { agent }),
    ]);
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ unit: 'binary', maxLength: 60 }),
          fc
            .array(
              fc.constantFrom(
                'or',
                'OR',
                '"',
                '-',
                '!',
                '&',
                '|',
                '<->',
                '(',
                ')',
                ':*',
                '\\',
                "'",
                '脚',
                'x',
              ),
            )
            .map((a) => a.join(' ')),
        ),
        async (q) => {
          const hits = await pg.store.search(ORG, agent, q, T);
          expect(hits.length).toBeLessThanOrEqual(1);
        },
      ),
      { numRuns: 150 },
    );
    expect(toWebSearchQuery('!!! ---')).toBeNull();
    expect(await pg.store.search(ORG, agent, '"" -- ((', T)).toEqual([]);
  });

  it('indexText / toWebSearchQuery: bigrams for CJK runs, plain lower-case terms, or-joined', () => {
    expect(indexText('部署脚本build-kit运行')).toBe('部署 署脚 脚本 build kit 运行');
    expect(toWebSearchQuery('Where did Caroline go? 脚本')).toBe('caroline or 脚本');
    expect(toWebSearchQuery('部署脚本')).toBe('"部署 署脚 脚本"');
    expect(toWebSearchQuery('the or a')).toBe('"the" or "or" or "a"');
  });

  it('directives: stored envelope read back through the contract.md §4.2 rules, other org sees none', async () => {
    const version = randomUUID();
    await pg.store.setDirective({
      org_id: ORG,
      agent_id: AGENT,
      content: 'Be brief.',
      injection_mode: 'weird',
      version_id: version,
    });
    const source = new PgDirectiveSource(pg.store, {
      directiveMs: 2000,
      hotMs: 2000,
      coldMs: 2000,
      wallMs: 2000,
    });
    const signal = new AbortController().signal;
    expect(await source.get(ORG, AGENT, signal)).toEqual({
      content: 'Be brief.',
      injection_mode: 'system_first',
      version_id: version,
    });
    expect(await source.get(OTHER_ORG, AGENT, signal)).toBeNull();
  });

  it('retrieve over the PostgreSQL sources: three successful branches, own-tenant hits only', async () => {
    const times = { directiveMs: 2000, hotMs: 2000, coldMs: 2000, wallMs: 2000 };
    const sources = pgSources(pg.store, times);
    const r = await retrieve(
      sources,
      { orgId: ORG.toUpperCase(), agentId: AGENT, query: 'lighthouse', skipHot: false, skipCold: false },
      { wallMs: 2000, directiveMs: 2000, hotMs: 2000, coldMs: 2000 },
      new AbortController().signal,
    );
    expect(r.branches.map((b) => b.status)).toEqual(['success', 'success', 'success']);
    expect(r.cold.map((h) => contentText(h.content))).toEqual(['own note about the lighthouse']);
    expect(r.dropped).toEqual({ invalid: 0, foreign: 0 });
    expect(r.directive?.content).toBe('Be brief.');
  });

  it('precedence: memory URL, then PostgreSQL, then embedded (directives from PostgreSQL without Redis)', async () => {
    // What is pinned is which store answers, not how fast: the server's statement timeout and the read's own
    // bound (the cold branch's time within the wall) both long enough that a busy machine cannot miss them.
    const env = {
      IBEX_CONTEXT_POSTGRES_URL: PG_TEST_URL,
      IBEX_CONTEXT_POSTGRES_SCHEMA: schema,
      IBEX_CONTEXT_POSTGRES_STATEMENT_TIMEOUT_MS: '2000',
      IBEX_CONTEXT_TIMEOUT_MS: '2000',
      IBEX_CONTEXT_DEADLINE_MS: '2000',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '2000',
    };
    const pgOnly = await createSources(loadSettings(env));
    const withHttp = await createSources(
      loadSettings({
        ...env,
        IBEX_CONTEXT_MEMORY_BASE_URL: 'http://127.0.0.1:1',
        IBEX_CONTEXT_MEMORY_API_TOKEN: 't',
      }),
    );
    try {
      expect(pgOnly.kind).toEqual({ memory: 'postgres', directive: 'postgres' });
      expect(withHttp.kind).toEqual({ memory: 'http', directive: 'postgres' });
      const found = await pgOnly.memory.search(ORG, AGENT, 'lighthouse', new AbortController().signal);
      expect((found as ValidatedHits).hits).toHaveLength(1);
    } finally {
      await pgOnly.close();
      await withHttp.close();
    }
  });

  it('memories leaves room on each page, so count and usefulness updates stay heap-only (no index entries)', async () => {
    const [row] = await adminQuery<{ reloptions: string[] | null }>(
      `SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relname = 'memories'`,
      [schema],
    );
    expect(row?.reloptions).toContain('fillfactor=85');
  });

  it('search stems English words as the embedded store does and keeps every word: "painting" finds "painted", "again" is searched', async () => {
    const org = randomUUID();
    const agent = randomUUID();
    const painted = randomUUID();
    const again = randomUUID();
    await pg.store.upsertMemories([
      memory(painted, 'I painted a sunrise over the lake last week', { org, agent }),
      memory(again, 'We met at the harbour once more, and again on Sunday', { org, agent }),
      memory(randomUUID(), 'chess club on Tuesdays', { org, agent }),
    ]);
    const ids = async (query: string) =>
      (await pg.store.search(org, agent, query, T)).map((h) => h.memory.id);
    expect(await ids('painting')).toEqual([painted]);
    expect(await ids('paints')).toEqual([painted]);
    // A word pg_catalog.english would drop as a stop word.
    expect(await ids('again')).toEqual([again]);
    expect(await ids('zeppelin')).toEqual([]);
  });

  it("search ranks by BM25: a rare query word outweighs a common one, whatever the rows' lengths", async () => {
    const org = randomUUID();
    const agent = randomUUID();
    const rare = randomUUID();
    const rows = Array.from({ length: 10 }, (_, i) =>
      memory(randomUUID(), `Caroline laughed ${i}`, { org, agent }),
    );
    rows.push(
      memory(rare, 'we watched a big old silver zeppelin float slowly over the harbour', { org, agent }),
    );
    await pg.store.replaceAgent(org, agent, rows);
    // ts_rank (no idf, length-normalised) put the short "Caroline" rows first; BM25 puts the only zeppelin.
    for (const neighbours of [0, 2]) {
      const opts = { ...T, neighbours, limit: 20 };
      const hits = await pg.store.search(org, agent, 'Did Caroline see a zeppelin?', opts);
      expect(hits[0]?.memory.id).toBe(rare);
      expect(hits).toHaveLength(11);
      const packed = await pg.store.searchHits(org, agent, 'Did Caroline see a zeppelin?', opts);
      expect(packed.hits.map((h) => h.memory_id)).toEqual(hits.map((h) => h.memory.id));
    }
    // The other rows tie on the common word: equal similarities, below the rare one's.
    const hits = await pg.store.search(org, agent, 'caroline zeppelin', { ...T, limit: 20 });
    const rest = new Set(hits.slice(1).map((h) => h.similarity));
    expect(rest.size).toBe(1);
    expect(hits[0]!.similarity).toBeGreaterThan([...rest][0]!);
  });

  it('the BM25 statistics follow every write: import, re-import, upsert, a row moved to another agent, feedback', async () => {
    const org = randomUUID();
    const agent = randomUUID();
    const other = randomUUID();
    const recount = async () => ({
      terms: await adminQuery(
        `SELECT org_id::text, agent_id::text, lexeme, docs FROM ${schema}.search_terms
         WHERE org_id = '${org}' ORDER BY agent_id, lexeme`,
      ),
      stats: await adminQuery(
        `SELECT org_id::text, agent_id::text, docs, lexemes::int FROM ${schema}.search_stats
         WHERE org_id = '${org}' ORDER BY agent_id`,
      ),
    });
    const truth = async () => ({
      terms: await adminQuery(
        `SELECT m.org_id::text, m.agent_id::text, u.lexeme, count(*)::int AS docs
         FROM ${schema}.memories m, unnest(tsvector_to_array(m.search)) AS u(lexeme)
         WHERE m.org_id = '${org}' GROUP BY 1, 2, 3 ORDER BY 2, 3`,
      ),
      stats: await adminQuery(
        `SELECT org_id::text, agent_id::text, count(*)::int AS docs, sum(length(search))::int AS lexemes
         FROM ${schema}.memories WHERE org_id = '${org}' GROUP BY 1, 2 ORDER BY 2`,
      ),
    });
    const moved = randomUUID();
    await pg.store.replaceAgent(org, agent, [
      memory(moved, 'the painter paints the lake', { org, agent }),
      memory(randomUUID(), 'a lake swim in 2024', { org, agent }),
      memory(randomUUID(), 'Caroline paints again', { org, agent }),
    ]);
    const first = await recount();
    expect(first.stats).toEqual([{ org_id: org, agent_id: agent, docs: 3, lexemes: 12 }]);
    expect(first.terms.find((t) => t.lexeme === 'paint')).toMatchObject({ docs: 2 });
    expect(first).toEqual(await truth());
    // Re-import with one row fewer, then an upsert that rewrites one row and moves it to another agent.
    await pg.store.replaceAgent(org, agent, [
      memory(moved, 'the painter paints the lake', { org, agent }),
      memory(randomUUID(), 'Caroline paints again', { org, agent }),
    ]);
    expect(await recount()).toEqual(await truth());
    await pg.store.upsertMemories([memory(moved, 'zeppelin over the lake', { org, agent: other })]);
    const after = await recount();
    expect(after).toEqual(await truth());
    expect(after.stats).toEqual(
      [
        { org_id: org, agent_id: agent, docs: 1, lexemes: 3 },
        { org_id: org, agent_id: other, docs: 1, lexemes: 4 },
      ].sort((a, b) => (a.agent_id < b.agent_id ? -1 : 1)),
    );
    // Feedback and inclusion counts update rows without touching their text or the statistics.
    await pg.store.addInclusions([{ orgId: org, memoryId: moved, count: 3 }]);
    expect(await adminQuery(`SELECT inclusions FROM ${schema}.memories WHERE id = '${moved}'`)).toEqual([
      { inclusions: 3 },
    ]);
    expect(await recount()).toEqual(after);
    // An agent whose last row goes leaves no statistics behind.
    await pg.store.replaceAgent(org, other, []);
    expect((await recount()).stats).toEqual([{ org_id: org, agent_id: agent, docs: 1, lexemes: 3 }]);
    expect(await recount()).toEqual(await truth());
  });

  it('migration 4 re-indexes rows written before it: stemmed, every word and its position kept, CJK bigrams', async () => {
    const fresh = testSchema('stem');
    const client = new PgClient({ connectionString: PG_TEST_URL });
    await client.connect();
    const contents = [
      'Painting, painted paintings: again and again the painter paints',
      '部署脚本 build kit 运行 — the 署脚 run',
      'The lake, the LAKE! 42 swims in 2024',
    ];
    try {
      await migrate(
        client,
        fresh,
        MIGRATIONS.filter((m) => m.version <= 3),
      );
      for (const content of contents) {
        // As the store wrote rows before migration 4.
        await client.query(
          `INSERT INTO ${fresh}.memories (id, org_id, agent_id, content, category, confidence, created_at, search)
           VALUES ($1, $2, $3, $4, 'factual', 0.8, now(), to_tsvector('simple', $5))`,
          [randomUUID(), ORG, AGENT, content, indexText(content)],
        );
      }
      expect((await migrate(client, fresh)).applied).toEqual([4, 5]);
      const rows = await client.query<{ same: boolean; search: string }>(
        `SELECT search = to_tsvector('${fresh}.stemmed', $1) AS same, search::text AS search
         FROM ${fresh}.memories WHERE content = $2`,
        [indexText(contents[0]!), contents[0]],
      );
      expect(rows.rows[0]?.same).toBe(true);
      // Stems, with the positions of the words as written (and "the" kept: no stop words).
      expect(rows.rows[0]?.search).toBe("'again':4,6 'and':5 'paint':1,2,3,9 'painter':8 'the':7");
      for (const content of contents) {
        const [row] = (
          await client.query<{ same: boolean }>(
            `SELECT search = to_tsvector('${fresh}.stemmed', $1) AS same FROM ${fresh}.memories WHERE content = $2`,
            [indexText(content), content],
          )
        ).rows;
        expect(row?.same).toBe(true);
      }
    } finally {
      await client.end();
      await dropSchema(fresh);
    }
  });

  it('start-up applies migrations 4 and 5 to thousands of rows although reads run under a short statement timeout', async () => {
    const fresh = testSchema('stemtime');
    const client = new PgClient({ connectionString: PG_TEST_URL });
    await client.connect();
    let store: PgStore | undefined;
    try {
      await migrate(
        client,
        fresh,
        MIGRATIONS.filter((m) => m.version <= 3),
      );
      await client.query(
        `INSERT INTO ${fresh}.memories (id, org_id, agent_id, content, category, confidence, created_at, search)
         SELECT gen_random_uuid(), $1, $2, 'I painted the sunrise on day ' || i, 'factual', 0.8, now(),
           to_tsvector('simple', 'I painted the sunrise on day ' || i)
         FROM generate_series(1, 5000) AS i`,
        [ORG, AGENT],
      );
      const short = await PgStore.open({
        url: PG_TEST_URL,
        schema: fresh,
        statementTimeoutMs: 10,
        poolMax: 1,
      });
      expect(short.migration.applied).toEqual([4, 5]);
      await short.close();
      // The migrated index and statistics answer a search: three rows match. Read under the default
      // statement timeout: on two shared cores even a three-row search can outlast 10 ms.
      store = await PgStore.open({ url: PG_TEST_URL, schema: fresh, poolMax: 1 });
      expect((await store.search(ORG, AGENT, '4242 4243 4244', { timeoutMs: 2000 })).length).toBe(3);
      // Migration 5 counted the rows written before it.
      expect(await adminQuery(`SELECT docs FROM ${fresh}.search_stats`)).toEqual([{ docs: 5000 }]);
      expect(
        await adminQuery(
          `SELECT docs FROM ${fresh}.search_terms WHERE lexeme IN ('paint', '42') ORDER BY lexeme`,
        ),
      ).toEqual([{ docs: 1 }, { docs: 5000 }]);
    } finally {
      await store?.close();
      await client.end();
      await dropSchema(fresh);
    }
  });

  it('concurrent migration by two processes: each migration applied exactly once', async () => {
    const fresh = testSchema('mig');
    const script = path.resolve('dist/src/retrieval/postgres/pg-store.js');
    const child = () =>
      new Promise<string>((resolve, reject) => {
        const code = `import('${script}').then(async ({ PgStore }) => {
          const s = await PgStore.open({ url: process.env.U, schema: process.env.S, poolMax: 1 });
          process.stdout.write(JSON.stringify(s.migration)); await s.close(); })`;
        const p = spawn(process.execPath, ['-e', code], {
          env: { ...process.env, U: PG_TEST_URL, S: fresh },
        });
        let out = '';
        p.stdout.on('data', (d) => (out += d));
        p.on('exit', (c) => (c === 0 ? resolve(out) : reject(new Error(`child exited ${c}`))));
      });
    try {
      const results = (await Promise.all([child(), child()])).map((o) => JSON.parse(o));
      const applied = results.flatMap((r: { applied: number[] }) => r.applied).sort();
      expect(applied).toEqual(MIGRATIONS.map((m) => m.version));
      const latest = MIGRATIONS.at(-1)!.version;
      expect(results.map((r: { version: number }) => r.version)).toEqual([latest, latest]);
      const rows = await adminQuery(`SELECT version FROM ${fresh}.schema_migrations ORDER BY version`);
      expect(rows).toEqual(MIGRATIONS.map((m) => ({ version: m.version })));
    } finally {
      await dropSchema(fresh);
    }
  });
});
