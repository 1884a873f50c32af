/**
 * `ingest --locomo … --postgres <url>` and `memory-server --postgres` against the real
 * PostgreSQL at PG_URL, in a schema of their own dropped after: the import writes exactly what the
 * embedded import writes (same agents, ids and counts), a re-run is idempotent, and the dev memory server
 * answers the memory wire from the database.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { EmbeddedStore } from '../../../src/retrieval/sqlite/embedded-store.js';
import { LOCOMO_ORG_ID, readLocomo } from '../../../src/tools/locomo/dataset.js';
import { ingestLocomo } from '../../../src/tools/locomo/ingest.js';
import { startMemoryServer } from '../../../src/tools/memory-server/server.js';
import { runCli } from '../../helpers/cli.js';
import { adminQuery, describePg, PG_TEST_URL, pgTestFile, usePgStore } from '../../helpers/postgres.js';
import { waitFor } from '../../helpers/wait.js';
import { makeTempDir, removeTempDir, writeLocomoDataset } from '../fixtures.js';

const { reachable, schema } = await pgTestFile('ingest');
// Tests must pass without the evaluation data: the retrieval tests' own two conversations.
const dir = makeTempDir('ibex-pg-ingest-');
afterAll(() => removeTempDir(dir));
const LOCOMO = path.join(dir, 'locomo');
writeLocomoDataset(LOCOMO);
const env = { IBEX_CONTEXT_POSTGRES_SCHEMA: schema };

describePg('ingest and memory-server on PostgreSQL', reachable, () => {
  const pg = usePgStore(schema, { poolMax: 2 });

  it('imports LoCoMo exactly as the embedded store does, and a re-run changes nothing', async () => {
    const first = await runCli(['ingest', '--locomo', LOCOMO, '--postgres', PG_TEST_URL, '--json'], '', {
      env,
      timeoutMs: 60_000,
    });
    expect(first.code).toBe(0);
    const summary = JSON.parse(first.stdout);
    const embedded = EmbeddedStore.open(':memory:');
    try {
      const expected = await ingestLocomo(embedded, await readLocomo(LOCOMO), LOCOMO_ORG_ID, {
        db: embedded.path,
      });
      expect(summary).toEqual({ ...expected, db: `postgres:${schema}` });
      const counts = embedded.counts();
      expect(await pg.store.counts()).toEqual(counts);
      const again = await runCli(['ingest', '--locomo', LOCOMO, '--postgres', PG_TEST_URL, '--json'], '', {
        env,
        timeoutMs: 60_000,
      });
      expect(again.code).toBe(0);
      expect(await pg.store.counts()).toEqual(counts);
      // The re-run replaced every row: the import vacuums their dead versions instead of leaving them to
      // autovacuum (how many it can remove depends on other sessions' snapshots, so only the run is checked).
      // The search's term statistics too: their triggers leave a dead version per term and write.
      const vacuumed = async () => {
        const rows = await adminQuery<{ relname: string; last_vacuum: Date | null }>(
          `SELECT relname, last_vacuum FROM pg_stat_user_tables WHERE schemaname = $1
             AND relname IN ('memories', 'search_terms', 'search_stats')`,
          [schema],
        );
        return rows.length === 3 && rows.every((row) => row.last_vacuum !== null);
      };
      expect(await waitFor(vacuumed, 5_000)).toBe(true);
      // Same newest memories for an agent, in the same order.
      const agent = expected.agents[0]!.agent_id;
      const ids = (await pg.store.hot(LOCOMO_ORG_ID, agent, { timeoutMs: 5000 })).map((h) => h.memory.id);
      expect(ids).toEqual(embedded.hot(LOCOMO_ORG_ID, agent).map((h) => h.memory.id));
    } finally {
      embedded.close();
    }
  }, 120_000);

  it('rejects a bad --postgres with exit 2 and a JSON error naming the flag', async () => {
    const r = await runCli(['ingest', '--locomo', LOCOMO, '--postgres', 'mysql://x', '--json'], '', { env });
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout)).toEqual({ error: '--postgres must be a postgres:// URL' });
  });

  it('memory-server --postgres answers hot and search over the memory wire, every org of the agent', async () => {
    const org = randomUUID();
    const agent = randomUUID();
    const at = Date.UTC(2024, 0, 1);
    const row = (content: string, o = org) => ({
      id: randomUUID(),
      org_id: o,
      agent_id: agent,
      content,
      category: 'factual',
      confidence: 0.7,
      created_at: at,
    });
    await pg.store.upsertMemories([row('the harbour festival'), row('foreign harbour note', randomUUID())]);
    type Wire = { data: { results: { memory: { content: string }; rank: number; source: string }[] } };
    const server = await startMemoryServer({ token: 't0k', postgres: { url: PG_TEST_URL, schema }, port: 0 });
    try {
      const headers = { authorization: 'Bearer t0k', 'content-type': 'application/json' };
      const hot = (await (
        await fetch(`${server.url}/v1/memories/hot?agent_id=${agent}`, { headers })
      ).json()) as Wire;
      expect(hot.data.results).toHaveLength(2);
      const res = await fetch(`${server.url}/v1/memories/search`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ agent_id: agent, query: 'festival', limit: 10, min_confidence: 0 }),
      });
      const body = (await res.json()) as Wire;
      expect(body.data.results.map((h) => h.memory.content)).toEqual(['the harbour festival']);
      expect(body.data.results[0]).toMatchObject({ rank: 1, source: 'fts' });
    } finally {
      await server.close();
    }
  });
});
