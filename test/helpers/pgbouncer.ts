/**
 * PgBouncer for tests (bench/lib/pgbouncer.ts) in front of the test PostgreSQL (PG_URL). Without the
 * binary the tests FAIL under `CI=true` and are skipped with a printed notice otherwise (the rule of
 * test/helpers/reachable.ts).
 */
import { type PgBouncer, pgbouncerBinary, startPgBouncer } from '../../bench/lib/pgbouncer.js';
import { PG_TEST_URL } from './postgres.js';
import { describeIfReachable } from './reachable.js';

export type { PgBouncer };

/** `describe` that needs both PostgreSQL (`pgReachable`) and the PgBouncer binary. */
export function describePgBouncer(name: string, pgReachable: boolean, fn: () => void): void {
  const binary = pgbouncerBinary() !== undefined;
  describeIfReachable(
    name,
    pgReachable && binary,
    {
      what: 'PostgreSQL and PgBouncer',
      notice: binary
        ? `PostgreSQL not reachable at ${PG_TEST_URL}`
        : 'pgbouncer binary not found — apt-get install -y pgbouncer (Debian) to run the PgBouncer tests',
    },
    fn,
  );
}

/** Starts PgBouncer (transaction pooling) in front of the test database. */
export function startTestPgBouncer(o: { poolSize: number; connectQuery?: string }): Promise<PgBouncer> {
  return startPgBouncer({ targetUrl: PG_TEST_URL, ...o });
}
