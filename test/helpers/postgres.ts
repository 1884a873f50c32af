/**
 * PostgreSQL availability rule for tests: tests that need PostgreSQL run against `PG_URL`
 * (default `postgres://postgres@127.0.0.1:5432/test`). When it is unreachable they FAIL under `CI=true`,
 * and are skipped with a printed notice otherwise. Each test file works in its own schema, dropped after.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { PgDirectiveSource, PgMemorySource } from '../../src/retrieval/postgres/pg-sources.js';
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
