/**
 * A PgBouncer in transaction pooling mode for tests, started on a free loopback port in front of the test
 * PostgreSQL (PG_URL) with a temporary config, and stopped after. The binary is Debian's `pgbouncer`
 * package (`apt-get install -y pgbouncer`); without it the tests FAIL under `CI=true` and are skipped with
 * a printed notice otherwise (the rule of test/helpers/reachable.ts).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { PG_TEST_URL } from './postgres.js';
import { describeIfReachable } from './reachable.js';

/** Where the PgBouncer binary is, or `undefined`. */
export function pgbouncerBinary(): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/bin']) {
    const file = path.join(dir, 'pgbouncer');
    if (dir !== '' && existsSync(file)) return file;
  }
  return undefined;
}

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

/** A free loopback TCP port (bound to port 0 and released: PgBouncer cannot be told to pick one). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A running PgBouncer. */
export interface PgBouncer {
  /** `postgres://…` URL of the test database through PgBouncer. */
  url: string;
  /** Its admin console (`SHOW POOLS`, …). */
  adminUrl: string;
  /** Rows of `SHOW POOLS` for the test database. */
  pools(): Promise<Record<string, string | number>[]>;
  stop(): Promise<void>;
}

/**
 * Starts PgBouncer (pool_mode = transaction) for the test database.
 * @param o.poolSize server connections per database/user pair (`default_pool_size`).
 * @param o.connectQuery run on each new server connection (e.g. `SET statement_timeout = 200`).
 * @throws Error when it does not accept connections within 5 s (its log in the message).
 */
export async function startPgBouncer(o: { poolSize: number; connectQuery?: string }): Promise<PgBouncer> {
  const binary = pgbouncerBinary();
  if (!binary) throw new Error('pgbouncer binary not found');
  const target = new URL(PG_TEST_URL);
  const db = target.pathname.slice(1);
  const user = decodeURIComponent(target.username || 'postgres');
  const dir = mkdtempSync(path.join(tmpdir(), 'ibex-pgbouncer-'));
  const port = await freePort();
  const connectQuery = o.connectQuery ? ` connect_query='${o.connectQuery.replace(/'/g, "''")}'` : '';
  const ini = `[databases]
${db} = host=${target.hostname} port=${target.port || 5432} dbname=${db}${connectQuery}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = trust
auth_file = ${dir}/users.txt
admin_users = ${user}
pool_mode = transaction
default_pool_size = ${o.poolSize}
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = ${dir}/pgbouncer.log
`;
  writeFileSync(path.join(dir, 'pgbouncer.ini'), ini);
  writeFileSync(path.join(dir, 'users.txt'), `"${user}" ""\n`);
  // PgBouncer refuses to run as root; as root it is told to switch to `nobody`, who must read the config.
  chmodSync(dir, 0o777);
  const args = [path.join(dir, 'pgbouncer.ini')];
  if (process.getuid?.() === 0) args.unshift('-u', 'nobody');
  const child: ChildProcess = spawn(binary, args, { stdio: 'ignore' });
  const url = `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${db}`;
  const adminUrl = `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/pgbouncer`;
  const log = () => {
    try {
      return readFileSync(path.join(dir, 'pgbouncer.log'), 'utf8').slice(-2000);
    } catch {
      return '(no log)';
    }
  };
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 5000;
  for (;;) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 500 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      break;
    } catch (err) {
      await client.end().catch(() => undefined);
      if (Date.now() > deadline || child.exitCode !== null) {
        const text = log();
        await stop();
        throw new Error(`pgbouncer did not start: ${(err as Error).message}\n${text}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url,
    adminUrl,
    async pools() {
      // The admin console speaks the simple query protocol only.
      const client = new pg.Client({ connectionString: adminUrl });
      client.on('error', () => undefined);
      await client.connect();
      try {
        const r = await client.query({ text: 'SHOW POOLS', queryMode: 'simple' } as pg.QueryConfig);
        return r.rows.filter((row) => row.database === db);
      } finally {
        await client.end();
      }
    },
    stop,
  };
}
