/**
 * Start-up failures found only when the service opens its ports and stores (a port in use, a database
 * missing or refusing) end `serve` with one line on stderr naming the setting and the cause, exit 1, no
 * JSON log line with a stack on stdout; at debug level the stack is logged.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../../helpers/cli.js';
import { closedPort } from '../../helpers/closed-port.js';
import { PG_TEST_URL, probePostgres } from '../../helpers/postgres.js';
import { describeIfReachable } from '../../helpers/reachable.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'ibex-startup-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A port something listens on, and a port nothing listens on. */
async function ports(): Promise<{ busy: number; close: () => void; free: number }> {
  const listen = () =>
    new Promise<net.Server>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => resolve(s));
    });
  const busy = await listen();
  const free = await closedPort();
  return { busy: (busy.address() as net.AddressInfo).port, close: () => busy.close(), free };
}

/** `serve` with only the variables given (and a store of its own), on a free admin port by default. */
function serve(env: Record<string, string>) {
  return runCli(['serve'], '', {
    env: {
      IBEX_CONTEXT_EMBEDDED_DB: path.join(dir, 'ibex.db'),
      IBEX_CONTEXT_POOL_MIN_THREADS: '1',
      IBEX_CONTEXT_POOL_MAX_THREADS: '1',
      IBEX_CONTEXT_MEMORY_BASE_URL: '',
      IBEX_CONTEXT_REDIS_URL: '',
      IBEX_CONTEXT_POSTGRES_URL: '',
      IBEX_CONTEXT_LOG_LEVEL: 'info',
      ...env,
    },
    timeoutMs: 30_000,
  });
}

function expectOneLine(r: { code: number | null; stdout: string; stderr: string }, line: RegExp): void {
  expect(r.code).toBe(1);
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(line);
  expect(r.stdout).not.toContain('"level":"fatal"');
  expect(r.stdout).not.toContain('    at ');
}

describe('serve start-up failures', () => {
  it('a gRPC port in use names IBEX_CONTEXT_GRPC_ADDR', async () => {
    const p = await ports();
    try {
      const r = await serve({
        IBEX_CONTEXT_GRPC_ADDR: `127.0.0.1:${p.busy}`,
        IBEX_CONTEXT_ADMIN_ADDR: `127.0.0.1:${p.free}`,
      });
      expectOneLine(
        r,
        new RegExp(
          `^ibex-context: cannot start: IBEX_CONTEXT_GRPC_ADDR \\(127\\.0\\.0\\.1:${p.busy}\\): EADDRINUSE: address already in use`,
        ),
      );
    } finally {
      p.close();
    }
  });

  it('an admin port in use names IBEX_CONTEXT_ADMIN_ADDR; at debug level the stack is logged', async () => {
    const p = await ports();
    try {
      const env = {
        IBEX_CONTEXT_GRPC_ADDR: `127.0.0.1:${p.free}`,
        IBEX_CONTEXT_ADMIN_ADDR: `127.0.0.1:${p.busy}`,
      };
      const r = await serve(env);
      expectOneLine(
        r,
        new RegExp(`^ibex-context: cannot start: IBEX_CONTEXT_ADMIN_ADDR \\(127\\.0\\.0\\.1:${p.busy}\\): `),
      );
      const debug = await serve({ ...env, IBEX_CONTEXT_LOG_LEVEL: 'debug' });
      expect(debug.code).toBe(1);
      expect(debug.stdout).toMatch(/"msg":"start-up failed"/);
      expect(debug.stdout).toContain('EADDRINUSE');
      expect(debug.stdout).toContain('    at ');
    } finally {
      p.close();
    }
  });

  it('a PostgreSQL that refuses names IBEX_CONTEXT_POSTGRES_URL without its password', async () => {
    const p = await ports();
    p.close();
    const r = await serve({
      IBEX_CONTEXT_GRPC_ADDR: '127.0.0.1:0',
      IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
      IBEX_CONTEXT_POSTGRES_URL: `postgres://ibex:s3cret-pw@127.0.0.1:${p.free}/ibex`,
    });
    expectOneLine(
      r,
      new RegExp(
        `^ibex-context: cannot start: IBEX_CONTEXT_POSTGRES_URL \\(postgres://127\\.0\\.0\\.1:${p.free}/ibex\\): connect ECONNREFUSED`,
      ),
    );
    expect(r.stderr + r.stdout).not.toContain('s3cret-pw');
  });
});

const pgReachable = await probePostgres();
describeIfReachable(
  'serve against a PostgreSQL without the database',
  pgReachable,
  { what: 'PostgreSQL', notice: `PostgreSQL not reachable at ${PG_TEST_URL}; set PG_URL` },
  () => {
    it('names IBEX_CONTEXT_POSTGRES_URL and the missing database', async () => {
      const url = new URL(PG_TEST_URL);
      url.pathname = '/ibex_no_such_database_x7';
      const r = await serve({
        IBEX_CONTEXT_GRPC_ADDR: '127.0.0.1:0',
        IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
        IBEX_CONTEXT_POSTGRES_URL: url.toString(),
      });
      expectOneLine(
        r,
        /^ibex-context: cannot start: IBEX_CONTEXT_POSTGRES_URL \(postgres:\/\/[^)]*\/ibex_no_such_database_x7\): database "ibex_no_such_database_x7" does not exist$/,
      );
    });
  },
);
