/**
 * The PostgreSQL store's read cache against the real server at PG_URL: hot reads and directives are
 * served from memory until a write — this store's own at once, another replica's through NOTIFY at its
 * commit — and read through while the LISTEN connection is down.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { pgEvents } from '../../../src/retrieval/postgres/pg-stats.js';
import { PG_CACHE_MAX_AGE_MS, PgStore } from '../../../src/retrieval/postgres/pg-store.js';
import { adminQuery, describePg, dropSchema, PG_TEST_URL, pgTestFile } from '../../helpers/postgres.js';
import { waitFor } from '../../helpers/wait.js';
import { memoriesOf } from '../fixtures.js';

const { reachable, schema, org: ORG, agent: AGENT } = await pgTestFile('cache');
const T = { timeoutMs: 2000 };

function directive(content: string) {
  return { org_id: ORG, agent_id: AGENT, content, injection_mode: 'system_first', version_id: randomUUID() };
}

describePg('PostgreSQL store read cache', reachable, () => {
  let a: PgStore;
  let b: PgStore;
  const appA = `ibex-test-${schema}-a`;
  beforeAll(async () => {
    a = await PgStore.open({ url: PG_TEST_URL, schema, applicationName: appA, poolMin: 1 });
    b = await PgStore.open({ url: PG_TEST_URL, schema, applicationName: `ibex-test-${schema}-b` });
    await a.replaceAgent(ORG, AGENT, memoriesOf(ORG, AGENT, 3), directive('first'));
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await dropSchema(schema);
  });

  it('a cached hot read and directive answer without the database; a write elsewhere is seen after its NOTIFY', async () => {
    expect(a.caching).toBe(true);
    // The store's own write's NOTIFY comes back to it too (emptying the cache once more): let it arrive.
    await new Promise((r) => setTimeout(r, 300));
    expect(await a.hot(ORG, AGENT, T)).toHaveLength(3);
    expect((await a.getDirective(ORG, AGENT, T))?.content).toBe('first');
    // Unreadable tables (no NOTIFY: a rename is not a write of the store): only the cache can answer.
    await adminQuery(`ALTER TABLE ${schema}.memories RENAME TO memories_away`);
    await adminQuery(`ALTER TABLE ${schema}.directives RENAME TO directives_away`);
    try {
      expect(await a.hot(ORG, AGENT, T)).toHaveLength(3);
      expect((await a.getDirective(ORG, AGENT, T))?.content).toBe('first');
      // A different limit is another key: it reaches the database.
      await expect(a.hot(ORG, AGENT, { ...T, limit: 2 })).rejects.toMatchObject({ code: '42P01' });
    } finally {
      await adminQuery(`ALTER TABLE ${schema}.memories_away RENAME TO memories`);
      await adminQuery(`ALTER TABLE ${schema}.directives_away RENAME TO directives`);
    }
    // Replica b writes; replica a hears it at b's commit.
    await b.upsertMemories(
      memoriesOf(ORG, AGENT, 1, 'newer').map((m) => ({ ...m, created_at: Date.UTC(2030, 0, 1) })),
    );
    await b.setDirective(directive('second'));
    expect(await waitFor(async () => (await a.hot(ORG, AGENT, T)).length === 4)).toBe(true);
    expect((await a.hot(ORG, AGENT, T))[0]?.memory.content).toBe('newer memory 0 about gardening');
    expect((await a.getDirective(ORG, AGENT, T))?.content).toBe('second');
  });

  it("this store's own write is seen by its next read, without waiting for the notification", async () => {
    expect(await a.hot(ORG, AGENT, T)).toHaveLength(4);
    await a.upsertMemories(
      memoriesOf(ORG, AGENT, 1, 'own').map((m) => ({ ...m, created_at: Date.UTC(2031, 0, 1) })),
    );
    const hits = await a.hot(ORG, AGENT, T);
    expect(hits).toHaveLength(5);
    expect(hits[0]?.memory.content).toBe('own memory 0 about gardening');
  });

  it('LISTEN connection lost: reads go to the database until it is back, then cache again', async () => {
    expect(await a.hot(ORG, AGENT, T)).toHaveLength(5);
    const opened = pgEvents().listen_connections_opened;
    await adminQuery('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
      `${appA}-listen`,
    ]);
    expect(await waitFor(() => !a.caching, 2000)).toBe(true);
    // A write during the gap, whose NOTIFY nobody in `a` hears: `a` must not answer from its cache.
    await adminQuery(`DELETE FROM ${schema}.memories WHERE content LIKE 'own%'`);
    expect(await a.hot(ORG, AGENT, T)).toHaveLength(4);
    expect(await waitFor(() => a.caching, 3000)).toBe(true);
    expect(pgEvents().listen_connections_opened).toBeGreaterThan(opened);
    expect(await a.hot(ORG, AGENT, T)).toHaveLength(4);
  });

  it("an inclusion flush leaves the other replica's cache warm (no NOTIFY); a content write empties it", async () => {
    expect(await waitFor(() => a.caching && b.caching)).toBe(true);
    // Earlier writes' notifications arrive first.
    await new Promise((r) => setTimeout(r, 300));
    const cached = await b.hot(ORG, AGENT, T);
    expect(cached.length).toBeGreaterThan(0);
    const counts = cached.map((h) => h.memory.retrieval_count ?? 0);
    const before = pgEvents();
    const flushed = await a.addInclusions(
      cached.map((h) => ({ memoryId: h.memory.id, orgId: ORG, count: 1 })),
    );
    expect(flushed).toBe(cached.length);
    // A NOTIFY, had the flush sent one, arrives at commit: give it the time it takes.
    await new Promise((r) => setTimeout(r, 300));
    expect(pgEvents().cache_invalidations).toBe(before.cache_invalidations);
    expect(pgEvents().unannounced_writes).toBe(before.unannounced_writes + 1);
    // Unreadable table: only b's cache can answer, with the counts it held (stale by at most the max age).
    await adminQuery(`ALTER TABLE ${schema}.memories RENAME TO memories_away`);
    try {
      const warm = await b.hot(ORG, AGENT, T);
      expect(warm.map((h) => h.memory.retrieval_count ?? 0)).toEqual(counts);
    } finally {
      await adminQuery(`ALTER TABLE ${schema}.memories_away RENAME TO memories`);
    }
    expect(PG_CACHE_MAX_AGE_MS).toBeGreaterThan(1000);
    // A content write on a empties b's cache at its commit: b reads the new memory and the new counts.
    await a.upsertMemories(
      memoriesOf(ORG, AGENT, 1, 'later').map((m) => ({ ...m, created_at: Date.UTC(2032, 0, 1) })),
    );
    expect(
      await waitFor(
        async () => (await b.hot(ORG, AGENT, T))[0]?.memory.content?.startsWith('later') === true,
      ),
    ).toBe(true);
    expect(pgEvents().cache_invalidations).toBeGreaterThan(before.cache_invalidations);
    const fresh = await b.hot(ORG, AGENT, T);
    const byId = new Map(fresh.map((h) => [h.memory.id, h.memory.retrieval_count ?? 0]));
    cached.forEach((h, i) => {
      if (byId.has(h.memory.id)) expect(byId.get(h.memory.id)).toBe(counts[i]! + 1);
    });
  });
});
