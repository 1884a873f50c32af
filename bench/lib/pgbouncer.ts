/**
 * A PgBouncer in transaction pooling mode in front of one PostgreSQL database, with a temporary config,
 * for tests and bench:replicas. The binary is Debian's `pgbouncer` package (`apt-get install -y pgbouncer`).
 * As root it runs as `nobody` (PgBouncer refuses root).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './service-process.js';

/** Where the PgBouncer binary is, or `undefined`. */
export function pgbouncerBinary(): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/bin']) {
    const file = path.join(dir, 'pgbouncer');
    if (dir !== '' && existsSync(file)) return file;
  }
  return undefined;
}

/** A running PgBouncer. */
export interface PgBouncer {
  /** `postgres://…` URL of the database through PgBouncer. */
  url: string;
  /** Its admin console (`SHOW POOLS`, …). */
  adminUrl: string;
  /** Rows of `SHOW POOLS` for the database. */
  pools(): Promise<Record<string, string | number>[]>;
  stop(): Promise<void>;
}

/**
 * Starts PgBouncer (pool_mode = transaction) on a free loopback port for the database of `targetUrl`.
 * @param o.poolSize server connections per database/user pair (`default_pool_size`).
 * @param o.connectQuery run on each new server connection (e.g. `SET statement_timeout = 200`).
 * @throws Error when it does not accept connections within 5 s (its log in the message).
 */
export async function startPgBouncer(o: {
  targetUrl: string;
  poolSize: number;
  connectQuery?: string;
}): Promise<PgBouncer> {
  const binary = pgbouncerBinary();
  if (!binary) throw new Error('pgbouncer binary not found');
  const target = new URL(o.targetUrl);
  const db = target.pathname.slice(1);
  const user = decodeURIComponent(target.username || 'postgres');
  const dir = mkdtempSync(path.join(tmpdir(), 'ibex-pgbouncer-'));
  // PgBouncer cannot be told to pick a port: a free one, bound and released (a race is possible, rare).
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
