/**
 * The PostgreSQL store through PgBouncer in transaction pooling mode (a fleet's replicas × pool size is
 * more than the server's max_connections): two stores ("replicas") with 4 client connections each share
 * 2 server connections; migrations, writes, hot/search/directive reads and the read cache work without
 * session state; the statement bound comes from the server side (PgBouncer's connect_query here).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PgStatementTimeout } from '../../../src/retrieval/postgres/pg-pool.js';
import { PgStore } from '../../../src/retrieval/postgres/pg-store.js';
import { describePgBouncer, type PgBouncer, startTestPgBouncer } from '../../helpers/pgbouncer.js';
import { adminQuery, dropSchema, PG_TEST_URL, pgTestFile } from '../../helpers/postgres.js';
import { waitFor } from '../../helpers/wait.js';
import { memoriesOf } from '../fixtures.js';

const { reachable, schema, org: ORG, agent: AGENT } = await pgTestFile('bouncer');
const T = { timeoutMs: 2000 };

describePgBouncer('PostgreSQL store through PgBouncer (transaction pooling)', reachable, () => {
  let bouncer: PgBouncer;
  let a: PgStore;
  let b: PgStore;
  beforeAll(async () => {
    bouncer = await startTestPgBouncer({ poolSize: 2, connectQuery: 'SET statement_timeout = 300' });
    const common = { schema, transactionPooler: true, poolMax: 4, poolMin: 4, statementTimeoutMs: 300 };
    // Both migrate through PgBouncer at once (the advisory lock is transaction-scoped).
    [a, b] = await Promise.all([
      PgStore.open({
        url: bouncer.url,
        ...common,
        listenUrl: PG_TEST_URL,
        applicationName: 'ibex-test-bouncer-a',
      }),
      PgStore.open({ url: bouncer.url, ...common, applicationName: 'ibex-test-bouncer-b' }),
    ]);
    await a.replaceAgent(ORG, AGENT, memoriesOf(ORG, AGENT, 5), {
      org_id: ORG,
      agent_id: AGENT,
      content: 'Stay on topic.',
      injection_mode: 'system_first',
      version_id: randomUUID(),
    });
  }, 20_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await bouncer?.stop();
    await dropSchema(schema);
  });

  it('8 client connections on 2 server connections: 200 concurrent reads of both replicas all answer', async () => {
    const reads = Array.from({ length: 200 }, (_, i) => {
      const store = i % 2 === 0 ? a : b;
      switch (i % 3) {
        case 0:
          return store.hot(ORG, AGENT, T).then((h) => h.length);
        case 1:
          return store.search(ORG, AGENT, 'chess', T).then((h) => h.length);
        default:
          return store.getDirective(ORG, AGENT, T).then((d) => (d?.content === 'Stay on topic.' ? 1 : 0));
      }
    });
    const counts = await Promise.all(reads);
    expect(counts).toEqual(Array.from({ length: 200 }, (_, i) => [5, 1, 1][i % 3]));
    const pools = await bouncer.pools();
    const servers = pools.reduce(
      (n, p) => n + Number(p.sv_active) + Number(p.sv_idle) + Number(p.sv_used),
      0,
    );
    expect(servers).toBeGreaterThan(0);
    expect(servers).toBeLessThanOrEqual(2);
    expect(pools.reduce((n, p) => n + Number(p.cl_active) + Number(p.cl_waiting), 0)).toBeGreaterThanOrEqual(
      8,
    );
  });

  it('the replica with a direct LISTEN URL caches; the one without reads every time', () => {
    expect(a.caching).toBe(true);
    expect(b.caching).toBe(false);
  });

  it("the server-side bound (PgBouncer's connect_query) ends a slow read: branch timeout, connections kept", async () => {
    await adminQuery(`ALTER TABLE ${schema}.memories RENAME TO memories_real`);
    await adminQuery(
      `CREATE FUNCTION ${schema}.test_sleep() RETURNS boolean LANGUAGE plpgsql AS 'BEGIN PERFORM pg_sleep(3); RETURN true; END'`,
    );
    await adminQuery(
      `CREATE VIEW ${schema}.memories AS SELECT * FROM ${schema}.memories_real WHERE ${schema}.test_sleep()`,
    );
    try {
      const t0 = performance.now();
      await expect(b.search(ORG, AGENT, 'chess', { timeoutMs: 5000 })).rejects.toBeInstanceOf(
        PgStatementTimeout,
      );
      expect(performance.now() - t0).toBeLessThan(2000);
    } finally {
      await adminQuery(`DROP VIEW ${schema}.memories`);
      await adminQuery(`ALTER TABLE ${schema}.memories_real RENAME TO memories`);
    }
    expect(await b.search(ORG, AGENT, 'chess', T)).toHaveLength(1);
  });

  it("a write through PgBouncer reaches the other replica's cache through NOTIFY (heard on a direct LISTEN)", async () => {
    expect(await a.hot(ORG, AGENT, T)).toHaveLength(5);
    await b.upsertMemories(
      memoriesOf(ORG, AGENT, 1, 'newer').map((m) => ({ ...m, created_at: Date.UTC(2030, 0, 1) })),
    );
    expect(await waitFor(async () => (await a.hot(ORG, AGENT, T)).length === 6)).toBe(true);
  });
});
