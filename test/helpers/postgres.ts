/**
 * PostgreSQL availability rule for tests (issue 15): tests that need PostgreSQL run against `PG_URL`
 * (default `postgres://postgres@127.0.0.1:5432/test`). When it is unreachable they FAIL under `CI=true`,
 * and are skipped with a printed notice otherwise. Each test file works in its own schema, dropped after.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, it } from 'vitest';

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

/**
 * `describe` that applies the availability rule; `reachable` comes from an awaited
 * {@link probePostgres} (top-level await in the test file), because vitest collects suites synchronously.
 */
export function describePg(name: string, reachable: boolean, fn: () => void): void {
  if (reachable) {
    describe(name, fn);
    return;
  }
  if (process.env.CI === 'true') {
    describe(name, () => {
      it('needs a reachable PostgreSQL (CI=true)', () => {
        throw new Error(NOTICE);
      });
    });
    return;
  }
  console.warn(NOTICE);
  describe.skip(name, fn);
}
