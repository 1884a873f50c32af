/**
 * PostgreSQL store faults against the real server at PG_URL, in a schema of its own dropped after. A
 * test-only view over the memories calls `pg_sleep` through a function, so reads are slow on demand.
 *
 * What is pinned: a read the branch gives up on answers at once and leaves its statement to the server's
 * statement_timeout, and its connection goes back to the pool — no connection destroyed, none opened, no
 * cancel request (each would be a backend start-up); a cancel is sent only as a backstop where the
 * server has no statement_timeout; a backend terminated while idle or mid-read costs no failed read (one
 * retry on another connection) and the pool is topped up again in the background.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PgStatementTimeout } from '../../../src/retrieval/postgres/pg-pool.js';
import { PgMemorySource } from '../../../src/retrieval/postgres/pg-sources.js';
import { pgEvents } from '../../../src/retrieval/postgres/pg-stats.js';
import { PgStore, type PgStoreOptions } from '../../../src/retrieval/postgres/pg-store.js';
import { retrieve } from '../../../src/retrieval/retrieve.js';
import * as pgt from '../../helpers/postgres.js';
import { waitFor } from '../../helpers/wait.js';
import { memoriesOf } from '../fixtures.js';

const { reachable, schema, org: ORG, agent: AGENT } = await pgt.pgTestFile('faults');
let apps = 0;

const slow = pgt.slowReadSwitch(schema);
const slowReads = slow.set;
const withSlowReads = slow.during;

/** Backend pids of a store's pool connections (its change feed's connection excluded), sorted. */
function backendPids(app: string): Promise<number[]> {
  return pgt.backendPidsWhere({ application_name: app });
}

/** Statements of `app`'s pool that are running now. */
async function activeStatements(app: string): Promise<number> {
  const rows = await pgt.adminQuery<{ n: string }>(
    "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'",
    [app],
  );
  return Number(rows[0]!.n);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

pgt.describePg('PostgreSQL store faults', reachable, () => {
  const stores: PgStore[] = [];
  const roles: string[] = [];
  /** A store on the test schema without the read cache (so every read reaches the slow table). */
  async function open(
    opts: Omit<PgStoreOptions, 'url' | 'schema' | 'applicationName'> = {},
    url = pgt.PG_TEST_URL,
  ) {
    const app = `ibex-test-${schema}-${++apps}`;
    const store = await PgStore.open({ url, schema, applicationName: app, listenUrl: '', ...opts });
    stores.push(store);
    return { store, app };
  }
  /** {@link open} with all `n` connections open: their backend pids, and the event counters as they stand. */
  async function openFull(n: number, statementTimeoutMs: number) {
    const { store, app } = await open({ poolMax: n, poolMin: n, statementTimeoutMs });
    const pids = await backendPids(app);
    expect(pids).toHaveLength(n);
    return { store, app, pids, before: pgEvents() };
  }
  /** The store kept its backends (`pids`, none replaced) and still reads all 5 hot memories. */
  async function expectSameBackends(store: PgStore, app: string, pids: number[]) {
    expect(await backendPids(app)).toEqual(pids);
    expect(await store.hot(ORG, AGENT, { timeoutMs: 2000 })).toHaveLength(5);
  }
  beforeAll(async () => {
    const { store } = await open();
    await store.replaceAgent(ORG, AGENT, memoriesOf(ORG, AGENT, 5));
    await store.setDirective({
      org_id: ORG,
      agent_id: AGENT,
      content: 'Stay on topic.',
      injection_mode: 'system_first',
      version_id: randomUUID(),
    });
  });
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    if (slow.on) await slowReads(0);
    await pgt.dropSchema(schema);
    for (const role of roles) await pgt.dropTestRole(role);
  });

  it('slow database: hot and cold `timeout`, directive answers; the statements end under statement_timeout on the same connections', async () => {
    const { store, app, pids, before } = await openFull(4, 300);
    await withSlowReads(2, async () => {
      const times = { directiveMs: 1000, hotMs: 100, coldMs: 100, wallMs: 1000 };
      const r = await retrieve(
        pgt.pgSources(store, times),
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
      // The server's statement_timeout (300 ms) stops the sleeping statements well before 2 s.
      expect(await waitFor(async () => (await activeStatements(app)) === 0, 1500)).toBe(true);
      expect(await waitFor(() => store.poolStats().idle === 4, 1000)).toBe(true);
    });
    expect(pgt.pgEventsSince(before)).toMatchObject({ connections_opened: 0, cancels_sent: 0 });
    await expectSameBackends(store, app, pids);
  });

  it('100 reads aborted mid-statement: 0 connections destroyed or opened, 0 cancels, every read rejected at its abort', async () => {
    const { store, app, pids, before } = await openFull(10, 200);
    await withSlowReads(5, async () => {
      for (let round = 0; round < 10; round++) {
        const reads = Array.from({ length: 10 }, () => {
          const ctl = new AbortController();
          const reason = new DOMException('hot_timeout', 'TimeoutError');
          const t0 = performance.now();
          const read = store.hot(ORG, AGENT, { timeoutMs: 10_000, signal: ctl.signal }).then(
            () => 'answered',
            (err: unknown) => (err === reason ? performance.now() - t0 : String(err)),
          );
          return { ctl, reason, read };
        });
        // Every statement is running on the server before the branch gives up.
        expect(await waitFor(async () => (await activeStatements(app)) === 10, 10_000)).toBe(true);
        for (const r of reads) r.ctl.abort(r.reason);
        const outcomes = await Promise.all(reads.map((r) => r.read));
        // Every read rejected with its own abort reason, not an error of the statement's end.
        expect(outcomes.every((o) => typeof o === 'number')).toBe(true);
        expect(await waitFor(() => store.poolStats().idle === 10, 10_000)).toBe(true);
      }
    });
    expect(pgt.pgEventsSince(before)).toMatchObject({
      reads_abandoned: 100,
      connections_opened: 0,
      connections_closed: 0,
      cancels_sent: 0,
    });
    await expectSameBackends(store, app, pids);
  });

  it('the server statement_timeout alone (read time far away): PgStatementTimeout → branch `timeout`, connection kept', async () => {
    const { store, app } = await open({ poolMax: 2, poolMin: 2, statementTimeoutMs: 80 });
    const pids = await backendPids(app);
    await withSlowReads(2, async () => {
      await expect(store.hot(ORG, AGENT, { timeoutMs: 5000 })).rejects.toBeInstanceOf(PgStatementTimeout);
      const source = new PgMemorySource(
        store,
        { directiveMs: 5000, hotMs: 5000, coldMs: 5000, wallMs: 5000 },
        65_536,
      );
      await expect(source.hot(ORG, AGENT, new AbortController().signal)).rejects.toMatchObject({
        status: 'timeout',
        detail: 'hot_timeout',
      });
    });
    await expectSameBackends(store, app, pids);
  });

  it('no statement_timeout on the server: one cancel as a backstop ends the abandoned statement, that connection is replaced', async () => {
    // transactionPooler sends no start-up options, so this server connection has statement_timeout 0.
    const { store, app } = await open({
      poolMax: 2,
      poolMin: 2,
      statementTimeoutMs: 100,
      transactionPooler: true,
    });
    const before = pgEvents();
    await withSlowReads(10, async () => {
      await expect(store.hot(ORG, AGENT, { timeoutMs: 50 })).rejects.toBeInstanceOf(PgStatementTimeout);
      // Backstop at 2 × 100 + 100 ms; the statement would otherwise sleep 10 s.
      expect(await waitFor(async () => (await activeStatements(app)) === 0, 3000)).toBe(true);
    });
    expect(pgt.pgEventsSince(before).cancels_sent).toBe(1);
    expect(await waitFor(() => store.poolStats().total === 2, 3000)).toBe(true);
    expect(await store.hot(ORG, AGENT, { timeoutMs: 2000 })).toHaveLength(5);
  });

  it('backends terminated while idle: no read fails, and the pool is warm again in the background', async () => {
    const { store, app } = await open({ poolMax: 4, poolMin: 4 });
    const source = new PgMemorySource(
      store,
      { directiveMs: 2000, hotMs: 2000, coldMs: 2000, wallMs: 2000 },
      65_536,
    );
    const old = await backendPids(app);
    expect(old).toHaveLength(4);
    await pgt.adminQuery(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
      [app],
    );
    // At once, before the pool has necessarily noticed: reads that hit a dead connection run again.
    const counts = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 === 0
          ? source.hot(ORG, AGENT, new AbortController().signal).then((hits) => hits.length)
          : source.search(ORG, AGENT, 'chess', new AbortController().signal).then((r) => r.hits.length),
      ),
    );
    expect(counts).toEqual(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? 5 : 1)));
    expect(
      await waitFor(async () => {
        const now = await backendPids(app);
        return now.length === 4 && now.every((pid) => !old.includes(pid));
      }, 3000),
    ).toBe(true);
  });

  it('backends terminated mid-read: the read runs again on another connection and answers', async () => {
    const { store, app } = await open({ poolMax: 4, poolMin: 4, statementTimeoutMs: 5000 });
    await slowReads(0.5);
    try {
      const inFlight = Array.from({ length: 4 }, () =>
        store.hot(ORG, AGENT, { timeoutMs: 4000 }).then(
          (hits) => hits.length,
          (err: { code?: string }) => err.code,
        ),
      );
      expect(await waitFor(async () => (await activeStatements(app)) >= 4)).toBe(true);
      const before = pgEvents();
      await pgt.adminQuery(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
        [app],
      );
      expect(await Promise.all(inFlight)).toEqual([5, 5, 5, 5]);
      expect(pgt.pgEventsSince(before).reads_retried).toBe(4);
    } finally {
      await slowReads(0);
    }
  });

  it("the server's idle_session_timeout closes idle connections: they are replaced in the background, no read fails", async () => {
    const role = `ibex_test_idle_${schema.slice(-8)}`;
    roles.push(role);
    const url = await pgt.createTestRole(role, schema, { idle_session_timeout: '300ms' });
    const before = pgEvents();
    const { store } = await open({ poolMax: 2, poolMin: 2 }, url);
    // Budgets generous enough for a busy machine: what is pinned is that a connection the server closed
    // costs no failed read (the pool replaces it; a read that meets one runs again), not the read's speed.
    const source = new PgMemorySource(
      store,
      { directiveMs: 1000, hotMs: 1000, coldMs: 1000, wallMs: 2000 },
      65_536,
    );
    const failures: string[] = [];
    // Quiet spells longer than the server's idle limit, each followed by reads with the default budgets.
    for (let spell = 0; spell < 4; spell++) {
      await sleep(500);
      for (const hits of await Promise.allSettled([
        source.hot(ORG, AGENT, new AbortController().signal),
        source.search(ORG, AGENT, 'chess', new AbortController().signal),
      ]))
        if (hits.status === 'rejected') failures.push(String((hits.reason as { detail?: string }).detail));
    }
    expect(failures).toEqual([]);
    // The server closed connections and the store opened new ones, outside the reads.
    expect(pgt.pgEventsSince(before).connections_closed).toBeGreaterThanOrEqual(4);
  });

  it('quiet spell past the idle timeout: poolMin connections stay open, the first read after it answers at once', async () => {
    const { store } = await open({ poolMax: 4, poolMin: 2, idleTimeoutMs: 100 });
    // Four reads at once open two more connections; past the idle timeout the pool is back to its minimum.
    await Promise.all(Array.from({ length: 4 }, () => store.hot(ORG, AGENT, { timeoutMs: 2000 })));
    await sleep(400);
    expect(store.poolStats()).toEqual({ total: 2, idle: 2, waiting: 0 });
    const opened = pgEvents().connections_opened;
    // The read's time is generous (a busy machine): what is pinned is that it needs no new connection.
    const source = new PgMemorySource(
      store,
      { directiveMs: 2000, hotMs: 2000, coldMs: 2000, wallMs: 2000 },
      65_536,
    );
    expect(await source.hot(ORG, AGENT, new AbortController().signal)).toHaveLength(5);
    expect(pgEvents().connections_opened).toBe(opened);
  });
  it('a table locked for 2 s under 20 reads/s: reads time out and degrade, no connection opened or closed, no cancel; the first read after the lock answers', async () => {
    const { store, app } = await open({ poolMax: 6, poolMin: 6, statementTimeoutMs: 250 });
    const pids = await backendPids(app);
    const source = new PgMemorySource(store, { directiveMs: 50, hotMs: 50, coldMs: 50, wallMs: 100 }, 65_536);
    const locker = new pg.Client({ connectionString: pgt.PG_TEST_URL });
    await locker.connect();
    // The event counters are process-wide: close the stores of earlier tests (one keeps reconnecting
    // under the server's idle_session_timeout) so only this store's connections are counted.
    await Promise.all(stores.splice(0, stores.length - 1).map((x) => x.close()));
    // A background refill one of them had started may still land: let it, before counting.
    await sleep(300);
    const before = pgEvents();
    const outcomes: string[] = [];
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${schema}.memories IN ACCESS EXCLUSIVE MODE`);
      const reads: Promise<void>[] = [];
      for (let i = 0; i < 40; i++) {
        reads.push(
          source.hot(ORG, AGENT, new AbortController().signal).then(
            () => void outcomes.push('answered'),
            (err: { detail?: string }) => void outcomes.push(err.detail ?? String(err)),
          ),
        );
        await sleep(50);
      }
      await Promise.all(reads);
    } finally {
      await locker.query('COMMIT');
      await locker.end();
    }
    // Every read behind the lock gave up at its own time; none answered, none failed otherwise.
    expect(outcomes).toHaveLength(40);
    expect(outcomes.filter((o) => o !== 'hot_timeout')).toEqual([]);
    // The waiting statements end under statement_timeout on the server and their connections come back.
    expect(await waitFor(async () => (await activeStatements(app)) === 0, 3000)).toBe(true);
    expect(await waitFor(() => store.poolStats().idle === 6, 3000)).toBe(true);
    expect(await source.hot(ORG, AGENT, new AbortController().signal)).toHaveLength(5);
    expect(pgt.pgEventsSince(before)).toMatchObject({
      connections_opened: 0,
      connections_closed: 0,
      cancels_sent: 0,
    });
    expect(await backendPids(app)).toEqual(pids);
  });
});
