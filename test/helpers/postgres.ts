/**
 * PostgreSQL availability rule for tests: tests that need PostgreSQL run against `PG_URL`
 * (default `postgres://postgres@127.0.0.1:5432/test`). When it is unreachable they FAIL under `CI=true`,
 * and are skipped with a printed notice otherwise. Each test file works in its own schema, dropped after.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { PgDirectiveSource, PgMemorySource } from '../../src/retrieval/postgres/pg-sources.js';
import { type PgEventCounts, pgEvents } from '../../src/retrieval/postgres/pg-stats.js';
import { PgStore, type PgStoreOptions } from '../../src/retrieval/postgres/pg-store.js';
import type { RetrievalSources, RetrievalTimeouts } from '../../src/retrieval/retrieve.js';
import { bundle } from '../retrieval/fixtures.js';
import { describeIfReachable } from './reachable.js';

/** URL the PostgreSQL tests use. */
export const PG_TEST_URL = process.env.PG_URL || 'postgres://postgres@127.0.0.1:5432/test';

const NOTICE = `PostgreSQL not reachable at ${PG_TEST_URL} — start it (e.g. pg_ctlcluster 15 main start) or set PG_URL`;

/** One `SELECT 1` with a short connect timeout. */
export async function probePostgres(url = PG_TEST_URL, timeoutMs = 1500): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A fresh schema name for one test file: `ibex_test_<tag>_<random>`. */
export function testSchema(tag: string): string {
  return `ibex_test_${tag}_${randomBytes(4).toString('hex')}`;
}

/** What {@link pgTestFile} hands a PostgreSQL test file. */
export interface PgTestFile {
  /** Whether PostgreSQL answered ({@link probePostgres}). */
  reachable: boolean;
  /** The fresh schema the file works in ({@link testSchema}). */
  schema: string;
  /** A random org id (UUID) for the file's own tenant. */
  org: string;
  /** A random agent id (UUID) for the file's own tenant. */
  agent: string;
}

/**
 * A PostgreSQL test file's start: whether the database is reachable, the fresh schema it works in and a
 * tenant (org and agent ids) of its own. Await it at the top level (vitest collects suites synchronously).
 */
export async function pgTestFile(tag: string): Promise<PgTestFile> {
  return {
    reachable: await probePostgres(),
    schema: testSchema(tag),
    org: randomUUID(),
    agent: randomUUID(),
  };
}

/** Runs `sql` on a short-lived connection (admin work: drop schema, terminate backends, …). */
export async function adminQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(
  sql: string,
  values: unknown[] = [],
): Promise<R[]> {
  const client = new pg.Client({ connectionString: PG_TEST_URL });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(sql, values)).rows;
  } finally {
    await client.end();
  }
}

/** Drops a schema this test created. */
export async function dropSchema(schema: string): Promise<void> {
  await adminQuery(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
}

/** `describe` under the availability rule ({@link describeIfReachable}) for PostgreSQL at {@link PG_TEST_URL}. */
export function describePg(name: string, reachable: boolean, fn: () => void): void {
  describeIfReachable(name, reachable, { what: 'PostgreSQL', notice: NOTICE }, fn);
}

/** What {@link usePgStore} hands a suite: the store open for its tests. */
export interface PgStoreFixture {
  readonly store: PgStore;
}

/**
 * A {@link PgStore} on the test database in `schema`, opened before the calling suite's tests and closed
 * after them, the schema dropped.
 */
export function usePgStore(schema: string, opts: Omit<PgStoreOptions, 'url' | 'schema'>): PgStoreFixture {
  let store: PgStore | undefined;
  beforeAll(async () => {
    store = await PgStore.open({ url: PG_TEST_URL, schema, ...opts });
  });
  afterAll(async () => {
    await store?.close();
    await dropSchema(schema);
  });
  return {
    get store() {
      if (!store) throw new Error('usePgStore: no store outside the suite');
      return store;
    },
  };
}

/** Sources reading the PostgreSQL `store` (hot and search with the default 65,536-code-point cap) under `times`. */
export function pgSources(store: PgStore, times: RetrievalTimeouts): RetrievalSources {
  return bundle(new PgMemorySource(store, times, 65_536), new PgDirectiveSource(store, times));
}

/**
 * Creates a login role for a test file's own connections (so its backends can be told apart in
 * `pg_stat_activity` by `usename`, and server settings can be given to it alone) with what a store needs
 * on `schema`, which must exist: CREATE on the database (opening a store runs the idempotent migration
 * step), USAGE and CREATE on the schema, and read/write on its tables, those created later by the test's
 * admin connection (e.g. {@link slowReadSwitch}'s view) included. `settings` become the role's defaults
 * (`ALTER ROLE … SET name = 'value'`), which every new connection of it takes.
 * Drop it with {@link dropTestRole}.
 * @returns the test URL ({@link PG_TEST_URL}) with the role as its user.
 */
export async function createTestRole(
  role: string,
  schema: string,
  settings: Record<string, string> = {},
): Promise<string> {
  const url = new URL(PG_TEST_URL);
  await adminQuery(`CREATE ROLE ${role} LOGIN`);
  for (const [name, value] of Object.entries(settings))
    await adminQuery(`ALTER ROLE ${role} SET ${name} = '${value}'`);
  await adminQuery(`GRANT CREATE ON DATABASE "${url.pathname.slice(1)}" TO ${role}`);
  await adminQuery(`GRANT USAGE, CREATE ON SCHEMA ${schema} TO ${role}`);
  await adminQuery(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${role}`);
  await adminQuery(
    `ALTER DEFAULT PRIVILEGES IN SCHEMA ${schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${role}`,
  );
  url.username = role;
  return url.toString();
}

/** Drops a role made by {@link createTestRole}, with its grants; a no-op for a role that does not exist. */
export async function dropTestRole(role: string): Promise<void> {
  const exists = await adminQuery('SELECT 1 FROM pg_roles WHERE rolname = $1', [role]);
  if (exists.length === 0) return;
  await adminQuery(`DROP OWNED BY ${role}`);
  await adminQuery(`DROP ROLE ${role}`);
}

/** Slows every read of a schema's `memories` on demand; see {@link slowReadSwitch}. */
export interface SlowReadSwitch {
  /** Makes every read of `memories` sleep `seconds` per row it scans (0 = the real table again). */
  set(seconds: number): Promise<void>;
  /** Runs `fn` while reads sleep `seconds` per row, then restores the real table. */
  during(seconds: number, fn: () => Promise<void>): Promise<void>;
  /** Whether reads are slowed now (restore with `set(0)` after a test that failed midway). */
  readonly on: boolean;
}

/**
 * A slow database for `schema`, on demand: the `memories` table is renamed and a view of the same name
 * over it calls `pg_sleep` through a function for each row it scans. Statements name the table, so
 * every read (and write) of a store on the schema is slowed; the directives are not.
 */
export function slowReadSwitch(schema: string): SlowReadSwitch {
  let on = false;
  const set = async (seconds: number) => {
    if (on) {
      await adminQuery(`DROP VIEW ${schema}.memories`);
      await adminQuery(`ALTER TABLE ${schema}.memories_real RENAME TO memories`);
      on = false;
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
    on = true;
  };
  return {
    set,
    async during(seconds, fn) {
      await set(seconds);
      try {
        await fn();
      } finally {
        await set(0);
      }
    },
    get on() {
      return on;
    },
  };
}

/**
 * Backend pids of the connections `pg_stat_activity` shows with these column values (e.g.
 * `{ application_name: app }`, `{ usename: role, application_name: 'ibex-context' }`), sorted.
 */
export async function backendPidsWhere(
  match: Partial<Record<'usename' | 'application_name', string>>,
): Promise<number[]> {
  const cols = Object.keys(match);
  const rows = await adminQuery<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE ${cols.map((c, i) => `${c} = $${i + 1}`).join(' AND ')} ORDER BY pid`,
    Object.values(match),
  );
  return rows.map((r) => r.pid);
}

/**
 * How much each PostgreSQL event counter has grown since `before` (a {@link pgEvents} copy taken earlier).
 *
 * @returns one difference per counter, counts.
 */
export function pgEventsSince(before: PgEventCounts): PgEventCounts {
  const now = pgEvents();
  const since = { ...now };
  for (const k of Object.keys(now) as (keyof PgEventCounts)[]) since[k] = now[k] - before[k];
  return since;
}
