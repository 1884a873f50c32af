/**
 * PostgreSQL store faults against the real server at PG_URL, in a schema of its own dropped
 * after. A test-only view over the memories calls `pg_sleep` through a function, so reads are slow on
 * demand: the branch times out (abort → cancel request; or the statement's own statement_timeout), the
 * backend stops running the statement, and the process keeps serving. Backends terminated mid-load
 * (`pg_terminate_backend`, the shared-server stand-in for a database restart) degrade the branch to
 * `error`, and the next reads recover on new connections.
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, expect, it } from 'vitest';
import { PgMemorySource } from '../../src/retrieval/postgres/pg-sources.js';
import { PgStatementTimeout } from '../../src/retrieval/postgres/pg-store.js';
import { retrieve } from '../../src/retrieval/retrieve.js';
import { adminQuery, describePg, pgSources, pgTestFile, usePgStore } from '../helpers/postgres.js';
import { memoriesOf } from './fixtures.js';

const { reachable, schema } = await pgTestFile('faults');
const app = `ibex-test-${schema}`;
const ORG = randomUUID();
const AGENT = randomUUID();

/** Makes every read of `memories` sleep `seconds` (0 = the real table again). */
let slowed = false;
async function slowReads(seconds: number): Promise<void> {
  if (slowed) {
    await adminQuery(`DROP VIEW ${schema}.memories`);
    await adminQuery(`ALTER TABLE ${schema}.memories_real RENAME TO memories`);
    slowed = false;
  }
  if (seconds === 0) return;
  await adminQuery(`ALTER TABLE ${schema}.memories RENAME TO memories_real`);
  await adminQuery(
    `CREATE OR REPLACE FUNCTION ${schema}.test_sleep(s double precision) RETURNS boolean
       LANGUAGE plpgsql VOLATILE AS 'BEGIN PERFORM pg_sleep(s); RETURN true; END'`,
  );
  await adminQuery(
    `CREATE VIEW ${schema}.memories AS SELECT * FROM ${schema}.memories_real WHERE ${schema}.test_sleep(${seconds})`,
  );
  slowed = true;
}

/** Statements of this test's pool that are running now. */
async function activeStatements(): Promise<number> {
  const rows = await adminQuery<{ n: string }>(
    "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'",
    [app],
  );
  return Number(rows[0]!.n);
}

/** Runs `fn` while every read of `memories` sleeps `seconds`, then restores the real table. */
async function withSlowReads(seconds: number, fn: () => Promise<void>): Promise<void> {
  await slowReads(seconds);
  try {
    await fn();
  } finally {
    await slowReads(0);
  }
}

async function waitFor(check: () => Promise<boolean>, ms = 3000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}

describePg('PostgreSQL store faults', reachable, () => {
  const pg = usePgStore(schema, { poolMax: 4, applicationName: app });
  beforeAll(async () => {
    const { store } = pg;
    await store.replaceAgent(ORG, AGENT, memoriesOf(ORG, AGENT, 5));
    await store.setDirective({
      org_id: ORG,
      agent_id: AGENT,
      content: 'Stay on topic.',
      injection_mode: 'system_first',
      version_id: randomUUID(),
    });
  });

  it('slow database: hot branch `timeout`, the statement is cancelled, directives still answer', async () => {
    await withSlowReads(2, async () => {
      const times = { directiveMs: 1000, hotMs: 100, coldMs: 100, wallMs: 1000 };
      const sources = pgSources(pg.store, times);
      const r = await retrieve(
        sources,
        { orgId: ORG, agentId: AGENT, query: 'chess', skipHot: false, skipCold: false },
        { wallMs: 1000, directiveMs: 1000, hotMs: 100, coldMs: 100 },
        new AbortController().signal,
      );
      expect(r.branches.map((b) => [b.name, b.status, b.detail])).toEqual([
        ['directive', 'success', ''],
        ['hot', 'timeout', 'hot_timeout'],
        ['cold', 'timeout', 'cold_timeout'],
      ]);
      expect(r.directive?.content).toBe('Stay on topic.');
      // The cancel request (or statement_timeout) stops the sleeping statements well before 2 s.
      expect(await waitFor(async () => (await activeStatements()) === 0, 1500)).toBe(true);
    });
    expect(await pg.store.hot(ORG, AGENT, { timeoutMs: 2000 })).toHaveLength(5);
  });

  it('abort alone (statement_timeout far away) sends the cancel request: the backend stops at once', async () => {
    await withSlowReads(5, async () => {
      const ctl = new AbortController();
      const reason = new DOMException('hot_timeout', 'TimeoutError');
      setTimeout(() => ctl.abort(reason), 50);
      const t0 = performance.now();
      await expect(pg.store.hot(ORG, AGENT, { timeoutMs: 10_000, signal: ctl.signal })).rejects.toBe(reason);
      // Rejected when the cancelled statement ended, long before its 5 s sleep or 10 s timeout.
      expect(performance.now() - t0).toBeLessThan(4000);
      expect(await waitFor(async () => (await activeStatements()) === 0, 3000)).toBe(true);
    });
    expect(await pg.store.hot(ORG, AGENT, { timeoutMs: 2000 })).toHaveLength(5);
  });

  it('statement_timeout alone (no abort) ends a slow statement: PgStatementTimeout → branch `timeout`', async () => {
    await withSlowReads(2, async () => {
      await expect(pg.store.hot(ORG, AGENT, { timeoutMs: 80 })).rejects.toBeInstanceOf(PgStatementTimeout);
      const source = new PgMemorySource(
        pg.store,
        { directiveMs: 5, hotMs: 80, coldMs: 80, wallMs: 80 },
        65_536,
      );
      await expect(source.hot(ORG, AGENT, new AbortController().signal)).rejects.toMatchObject({
        status: 'timeout',
        detail: 'hot_timeout',
      });
    });
    // The connection that timed out keeps serving with the next read's own timeout.
    expect(await pg.store.hot(ORG, AGENT, { timeoutMs: 2000 })).toHaveLength(5);
  });

  it('backends terminated mid-load: in-flight branches `error`, then reads recover', async () => {
    // Long enough that all four are surely running when the backends are terminated, even on a busy machine.
    await slowReads(2);
    const times = { directiveMs: 5000, hotMs: 5000, coldMs: 5000, wallMs: 5000 };
    const source = new PgMemorySource(pg.store, times, 65_536);
    const inFlight = Array.from({ length: 4 }, () =>
      source.hot(ORG, AGENT, new AbortController().signal).then(
        () => 'ok',
        (err: { status?: string; detail?: string }) => `${err.status}: ${err.detail}`,
      ),
    );
    try {
      expect(await waitFor(async () => (await activeStatements()) >= 4)).toBe(true);
      await adminQuery('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
        app,
      ]);
      expect(await Promise.all(inFlight)).toEqual(Array(4).fill('error: postgres unavailable (57P01)'));
    } finally {
      await slowReads(0);
    }
    // Recovery: every read of a short load succeeds on fresh connections.
    const statuses = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 === 0
          ? source.hot(ORG, AGENT, new AbortController().signal)
          : source.search(ORG, AGENT, 'chess', new AbortController().signal)
        ).then((hits) => hits.length),
      ),
    );
    expect(statuses).toEqual(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? 5 : 1)));
    expect(pg.store.poolStats().total).toBeLessThanOrEqual(4);
  });
});
