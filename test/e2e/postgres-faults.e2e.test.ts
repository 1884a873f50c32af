/**
 * PostgreSQL faults at the answer: the real service in-process (pool, retrieval, gRPC on loopback) on
 * the real PostgreSQL at PG_URL, through AssembleContext, at the store's default pool and statement
 * settings. The service connects as a role of this file's own, so its backends are told apart in
 * `pg_stat_activity` and server settings reach it alone.
 *
 * What is pinned: a locked memories table and a slow one cost the memory branches that read the
 * database (the hot branch answers from the read cache when it is warm), never the answer: OK before
 * the deadline with the directive and the history, the pool's connections kept (none opened, no cancel);
 * once the fault is gone the next calls answer L0 with every memory. Connections the server closed
 * (idle_session_timeout) or terminated are replaced in the background: the first call after them answers,
 * L0 within a few seconds.
 */
import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PgStore } from '../../src/retrieval/postgres/pg-store.js';
import type { AssembleContextResponse } from '../../src/wire/proto.js';
import { moved, scrape } from '../faults/helpers.js';
import {
  adminQuery,
  backendPidsWhere,
  createTestRole,
  describePg,
  dropSchema,
  dropTestRole,
  PG_TEST_URL,
  pgTestFile,
  slowReadSwitch,
} from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';
import { memories, request, startTestService, type TestService, tenant } from './harness.js';

const { reachable, schema } = await pgTestFile('e2efaults');
const t = tenant();
const seeded = memories(t.org, t.agent, 6);
const SEEDED_IDS = seeded.map((m) => m.id).sort();
const DIRECTIVE = 'You are the lake assistant.';
const HISTORY = 'user: Do you remember the lake?\nassistant: Yes.';
/** The service's own request timeout (the test environment's IBEX_CONTEXT_TIMEOUT), also the caller's. */
const DEADLINE_MS = 2000;
const EVENTS = 'ibex_context_postgres_events_total';
const INCLUSIONS = 'ibex_context_inclusions_total';
const POOL_MIN = 4; // IBEX_CONTEXT_POSTGRES_POOL_MIN's default
const role = `ibex_test_e2e_${schema.slice(-8)}`;
const idleRole = `ibex_test_e2e_idle_${schema.slice(-8)}`;
const slow = slowReadSwitch(schema);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A service reading `schema` as the user of `url`, the pool at its defaults. */
function startPgService(url: string): Promise<TestService> {
  // Inclusion counts written every 200 ms, so that the cases that wait for a write wait briefly.
  return startTestService({
    IBEX_CONTEXT_POSTGRES_URL: url,
    IBEX_CONTEXT_POSTGRES_SCHEMA: schema,
    IBEX_CONTEXT_INCLUSION_FLUSH_MS: '200',
  });
}

/** One AssembleContext under the caller's deadline: it must answer OK before it; with its wall time, ms. */
async function assemble(svc: TestService): Promise<{ res: AssembleContextResponse; ms: number }> {
  const t0 = performance.now();
  const r = await svc.client.assemble(request(t), { deadlineMs: DEADLINE_MS });
  const ms = performance.now() - t0;
  expect(r.status.code, r.status.details).toBe(status.OK);
  expect(ms).toBeLessThan(DEADLINE_MS);
  return { res: r.response!, ms };
}

/** Ids of the memories the answer included, sorted. */
function includedIds(res: AssembleContextResponse): string[] {
  return res.memories_used
    .filter((m) => m.exclusion === 'included')
    .map((m) => m.memory_id)
    .sort();
}

/** The answer's level, reasons and included memory ids, and whether it kept the directive and history. */
function shape(res: AssembleContextResponse) {
  return {
    level: res.degradation.level,
    reasons: res.degradation.reasons,
    branches: res.degradation.branches.map((b) => `${b.name}:${b.status}`),
    memories: includedIds(res),
    directive: res.assembled_context.startsWith(`${DIRECTIVE}\n`),
    history: res.assembled_context.includes(HISTORY),
  };
}

const L0 = {
  level: 'L0',
  reasons: [],
  branches: ['directive:success', 'hot:success', 'cold:success'],
  memories: SEEDED_IDS,
  directive: true,
  history: true,
};

/** Calls until one answers L0 (with every memory, the directive and the history); fails past `withinMs`. */
async function untilL0(svc: TestService, withinMs: number): Promise<void> {
  const t0 = performance.now();
  for (;;) {
    const { res } = await assemble(svc);
    if (res.degradation.level === 'L0') {
      expect(shape(res)).toEqual(L0);
      return;
    }
    expect(performance.now() - t0, `still ${res.degradation.reasons.join(',')}`).toBeLessThan(withinMs);
    await sleep(50);
  }
}

/** Backend pids of the pool of the service connected as `user` (its LISTEN connection excluded), sorted. */
function poolPids(user: string): Promise<number[]> {
  return backendPidsWhere({ usename: user, application_name: 'ibex-context' });
}

/** Whether every inclusion the service has counted is written (its background flush has run and ended). */
async function inclusionsFlushed(svc: TestService): Promise<boolean> {
  const m = await scrape(svc.service.adminUrl);
  const recorded = m.value(INCLUSIONS, { event: 'recorded' });
  return recorded > 0 && m.value(INCLUSIONS, { event: 'flushed' }) === recorded;
}

/**
 * An L0 call, then its inclusion counts written (IBEX_CONTEXT_INCLUSION_FLUSH_MS): a count write announces
 * nothing, so the cached hot read and directive stay warm.
 */
async function l0ThenFlushed(svc: TestService): Promise<void> {
  expect(shape((await assemble(svc)).res)).toEqual(L0);
  expect(await waitFor(() => inclusionsFlushed(svc), 3000)).toBe(true);
}

/**
 * A content write to the schema by another writer (another agent's memories), which every replica hears
 * through LISTEN/NOTIFY: the service's read caches are emptied, so the next reads go to the database.
 */
async function cachesEmptiedByAnotherWriter(svc: TestService): Promise<void> {
  const heard = async () =>
    (await scrape(svc.service.adminUrl)).value(EVENTS, { event: 'cache_invalidations' });
  const before = await heard();
  const other = tenant();
  const store = await PgStore.open({ url: PG_TEST_URL, schema, poolMax: 1 });
  try {
    await store.replaceAgent(other.org, other.agent, memories(other.org, other.agent, 1));
  } finally {
    await store.close();
  }
  expect(await waitFor(async () => (await heard()) > before, 3000)).toBe(true);
}

/** Calls one after another for `ms` (each OK before its deadline): every answer's shape. */
async function callsFor(svc: TestService, ms: number): Promise<ReturnType<typeof shape>[]> {
  const shapes: ReturnType<typeof shape>[] = [];
  const end = performance.now() + ms;
  while (performance.now() < end) {
    shapes.push(shape((await assemble(svc)).res));
    await sleep(20);
  }
  return shapes;
}

describePg('AssembleContext on PostgreSQL under database faults', reachable, () => {
  let svc: TestService;
  beforeAll(async () => {
    // Seeded through the store's write API, as the ingest path does.
    const store = await PgStore.open({ url: PG_TEST_URL, schema, poolMax: 2 });
    try {
      await store.replaceAgent(t.org, t.agent, seeded, {
        org_id: t.org,
        agent_id: t.agent,
        content: DIRECTIVE,
        injection_mode: 'system_first',
        version_id: randomUUID(),
      });
    } finally {
      await store.close();
    }
    svc = await startPgService(await createTestRole(role, schema));
  }, 20_000);
  afterAll(async () => {
    await svc?.stop();
    if (slow.on) await slow.set(0);
    await dropSchema(schema);
    await dropTestRole(role);
    await dropTestRole(idleRole);
  });

  it('memories table locked: L1 cold_timeout with the directive, history and the cached hot memories, in time, no connection opened; L0 once released', async () => {
    await l0ThenFlushed(svc);
    // Refills the cache; its inclusions' flush will wait behind the lock, holding one connection.
    expect(shape((await assemble(svc)).res)).toEqual(L0);
    const pids = await poolPids(role);
    // The start-up warm-up opens connections up to the pool's bound; idle, they stay 30 s.
    expect(pids.length).toBeGreaterThanOrEqual(POOL_MIN);
    const before = await scrape(svc.service.adminUrl);
    const locker = new pg.Client({ connectionString: PG_TEST_URL });
    await locker.connect();
    let during: Awaited<ReturnType<typeof callsFor>>;
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE ${schema}.memories IN ACCESS EXCLUSIVE MODE`);
      during = await callsFor(svc, 1500);
      expect(await poolPids(role)).toEqual(pids);
    } finally {
      await locker.query('COMMIT');
      await locker.end();
    }
    expect(during.length).toBeGreaterThanOrEqual(3);
    for (const s of during)
      expect(s).toEqual({
        ...L0,
        level: 'L1',
        reasons: ['cold_timeout:cold_timeout'],
        branches: ['directive:success', 'hot:success', 'cold:timeout'],
      });
    await untilL0(svc, 3000);
    const after = await scrape(svc.service.adminUrl);
    expect(moved(before, after, EVENTS, { event: 'connections_opened' })).toBe(0);
    expect(moved(before, after, EVENTS, { event: 'connections_closed' })).toBe(0);
    expect(moved(before, after, EVENTS, { event: 'cancels_sent' })).toBe(0);
    expect(await poolPids(role)).toEqual(pids);
  });

  it('slow database (every memories read sleeps): L2 hot and cold timeout with the directive and history, in time, no connection opened; L0 once fast again', async () => {
    // Another writer's content write empties the cache, so both memory branches read the slow table.
    await l0ThenFlushed(svc);
    await cachesEmptiedByAnotherWriter(svc);
    const pids = await poolPids(role);
    const before = await scrape(svc.service.adminUrl);
    let during: Awaited<ReturnType<typeof callsFor>> | undefined;
    await slow.during(0.5, async () => {
      during = await callsFor(svc, 1200);
      // Every statement ends under the server's statement_timeout (default 100 ms), long before the 0.5 s
      // sleep would: give the last one its 100 ms, and scheduling on a busy machine some more.
      const idle = async () =>
        (await adminQuery("SELECT 1 FROM pg_stat_activity WHERE usename = $1 AND state = 'active'", [role]))
          .length === 0;
      expect(await waitFor(idle, 400)).toBe(true);
    });
    expect(during!.length).toBeGreaterThanOrEqual(3);
    for (const s of during!)
      expect(s).toEqual({
        ...L0,
        level: 'L2',
        reasons: ['hot_timeout:hot_timeout', 'cold_timeout:cold_timeout'],
        branches: ['directive:success', 'hot:timeout', 'cold:timeout'],
        memories: [],
      });
    await untilL0(svc, 3000);
    const after = await scrape(svc.service.adminUrl);
    expect(moved(before, after, EVENTS, { event: 'connections_opened' })).toBe(0);
    expect(moved(before, after, EVENTS, { event: 'cancels_sent' })).toBe(0);
    expect(await poolPids(role)).toEqual(pids);
  });

  it('backends terminated: the next call answers in time, L0 within a few seconds, the pool is warm again on new connections', async () => {
    const old = await poolPids(role);
    expect(old.length).toBeGreaterThanOrEqual(POOL_MIN);
    const before = await scrape(svc.service.adminUrl);
    // Chosen first, terminated after: in one statement the planner may run pg_terminate_backend on rows
    // before the filters that come from pg_stat_activity's joins (usename, datname).
    const targets = await adminQuery<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND usename = $1 AND pid <> pg_backend_pid()',
      [role],
    );
    const killed = await adminQuery<{ pid: number }>(
      'SELECT p AS pid FROM unnest($1::int[]) AS p WHERE pg_terminate_backend(p)',
      [targets.map((r) => r.pid)],
    );
    // The pool and the change feed's LISTEN connection.
    expect(killed).toHaveLength(old.length + 1);
    const first = shape((await assemble(svc)).res);
    expect(first.directive && first.history).toBe(true);
    await untilL0(svc, 3000);
    expect(
      await waitFor(async () => {
        const now = await poolPids(role);
        return now.length >= POOL_MIN && now.every((pid) => !old.includes(pid));
      }, 3000),
    ).toBe(true);
    // The change feed listens again (after its 500 ms reconnect delay): the read cache is back.
    expect(
      await waitFor(async () => {
        const rows = await adminQuery(
          "SELECT 1 FROM pg_stat_activity WHERE usename = $1 AND application_name = 'ibex-context-listen'",
          [role],
        );
        return rows.length === 1;
      }, 3000),
    ).toBe(true);
    const after = await scrape(svc.service.adminUrl);
    expect(moved(before, after, EVENTS, { event: 'connections_opened' })).toBeGreaterThanOrEqual(POOL_MIN);
    expect(moved(before, after, EVENTS, { event: 'listen_connections_opened' })).toBeGreaterThanOrEqual(1);
  });

  it("idle past the server's idle_session_timeout: the first call answers L0 with every memory and the directive", async () => {
    const idleUrl = await createTestRole(idleRole, schema, { idle_session_timeout: '1s' });
    const idle = await startPgService(idleUrl);
    try {
      // Start-up may outlast the server's idle limit: the pool can be mid-way through replacing connections.
      let old: number[] = [];
      const someOpen = async () => {
        old = await poolPids(idleRole);
        return old.length > 0;
      };
      expect(await waitFor(someOpen, 2000)).toBe(true);
      const before = await scrape(idle.service.adminUrl);
      await sleep(3000);
      expect(shape((await assemble(idle)).res)).toEqual(L0);
      const after = await scrape(idle.service.adminUrl);
      // The server closed every connection the service had; the call ran on one the store opened since.
      expect((await poolPids(idleRole)).filter((pid) => old.includes(pid))).toEqual([]);
      expect(moved(before, after, EVENTS, { event: 'connections_closed' })).toBeGreaterThanOrEqual(
        old.length,
      );
      expect(moved(before, after, EVENTS, { event: 'connections_opened' })).toBeGreaterThanOrEqual(1);
    } finally {
      await idle.stop();
    }
  });
});
