/** The PostgreSQL store's connection pool: warm reads under the branch's time, and write transactions. */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { CHANGE_CHANNEL } from './pg-change-feed.js';
import { PG_EVENTS } from './pg-stats.js';

/** A read abandoned past its time (client-side timer or server statement_timeout). */
export class PgStatementTimeout extends Error {
  constructor(cause?: unknown) {
    super('statement timeout', { cause });
    this.name = 'PgStatementTimeout';
  }
}

/** Top-up interval to `poolMin` (e.g. while the server is down). */
const WARM_CHECK_MS = 1000;

interface Caller {
  gaveUp: boolean;
  answered?: boolean;
  onGiveUp?: () => void;
}

/** Stable per text (which names the schema). */
function statementName(text: string): string {
  let name = STATEMENT_NAMES.get(text);
  if (name === undefined) {
    name = `ibex_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
    STATEMENT_NAMES.set(text, name);
  }
  return name;
}
const STATEMENT_NAMES = new Map<string, string>();

function isBroken(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string' && (code.startsWith('57P') || code.startsWith('08') || code.startsWith('E')))
    return true;
  return err instanceof Error && /Connection terminated|not queryable/i.test(err.message);
}

export interface PgPoolOptions {
  config: pg.PoolConfig;
  min: number;
  /** Server-side bound of a read, ms (the cancel backstop waits twice this). */
  statementTimeoutMs: number;
  prepared: boolean;
  onIdleError?: (err: Error) => void;
}

/** A write's start: transaction-scoped settings, and the NOTIFY that empties replicas' read caches. */
const ANNOUNCED =
  "SELECT set_config('search_path', $1, true), set_config('statement_timeout', '0', true), pg_notify($2, $1)";
const UNANNOUNCED = "SELECT set_config('search_path', $1, true), set_config('statement_timeout', '0', true)";

export type PgWork = (client: pg.PoolClient) => Promise<void>;

export class PgPool {
  readonly #pool: pg.Pool;
  readonly #server: { host: string; port: number };
  readonly #min: number;
  readonly #statementTimeoutMs: number;
  readonly #prepared: boolean;
  readonly #warmTimer: NodeJS.Timeout;
  #warming = false;
  #closed = false;

  constructor(o: PgPoolOptions) {
    const pool = new pg.Pool(o.config);
    pool.on('connect', (client) => {
      PG_EVENTS.connections_opened++;
      // A server FATAL can reach a checked-out connection; its reads see the error anyway.
      client.on('error', () => undefined);
    });
    pool.on('remove', () => PG_EVENTS.connections_closed++);
    // Without a listener an idle connection's error would crash the process.
    pool.on('error', (err) => o.onIdleError?.(err));
    const probe = new pg.Client({ connectionString: o.config.connectionString }) as unknown as {
      host: string;
      port: number;
    };
    this.#pool = pool;
    this.#server = { host: probe.host, port: probe.port };
    this.#min = o.min;
    this.#statementTimeoutMs = o.statementTimeoutMs;
    this.#prepared = o.prepared;
    pool.on('remove', () => this.#topUp());
    this.#warmTimer = setInterval(() => this.#topUp(), WARM_CHECK_MS);
    this.#warmTimer.unref();
  }

  connect(): Promise<pg.PoolClient> {
    return this.#pool.connect();
  }

  async query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<R[]> {
    return (await this.#pool.query<R>(text, values)).rows;
  }

  poolStats(): { total: number; idle: number; waiting: number } {
    return { total: this.#pool.totalCount, idle: this.#pool.idleCount, waiting: this.#pool.waitingCount };
  }

  async warm(): Promise<void> {
    const missing = this.#min - this.#pool.totalCount;
    if (missing <= 0 || this.#warming || this.#closed || this.#pool.waitingCount > 0) return;
    this.#warming = true;
    try {
      // The pool opens a connection only when none is idle: hold the idle ones meanwhile.
      const n = missing + this.#pool.idleCount;
      const got = await Promise.allSettled(Array.from({ length: n }, () => this.#pool.connect()));
      for (const r of got) if (r.status === 'fulfilled') r.value.release();
    } finally {
      this.#warming = false;
    }
  }

  #topUp(): void {
    if (!this.#closed && this.#pool.totalCount < this.#min) void this.warm().catch(() => undefined);
  }

  #cancel(client: pg.PoolClient): void {
    PG_EVENTS.cancels_sent++;
    const { processID, secretKey } = client as unknown as { processID: number; secretKey: number };
    const con = new pg.Connection() as unknown as pg.Connection & {
      connect(port: number, host: string): void;
      cancel(pid: number, key: number): void;
    };
    con.on('error', () => undefined);
    con.once('connect', () => con.cancel(processID, secretKey));
    con.connect(this.#server.port, this.#server.host);
  }

  /**
   * One read under the branch's time: rejects at once past `timeoutMs` or on abort, leaving the statement
   * to the server's statement_timeout (docs/postgres.md). @throws PgStatementTimeout, the abort reason.
   */
  read<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[],
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<R[]> {
    signal?.throwIfAborted();
    return new Promise<R[]>((resolve, reject) => {
      const caller: Caller = { gaveUp: false };
      const end = (answered: boolean, fn: () => void) => {
        if (caller.gaveUp || caller.answered) return;
        if (answered) caller.answered = true;
        else {
          caller.gaveUp = true;
          caller.onGiveUp?.();
        }
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        fn();
      };
      const timer = setTimeout(
        () => end(false, () => reject(new PgStatementTimeout())),
        Math.max(1, timeoutMs),
      );
      const onAbort = () => end(false, () => reject(signal?.reason));
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#run<R>(text, values, caller, true).then(
        (rows) => end(true, () => resolve(rows)),
        (err: unknown) =>
          end(true, () =>
            reject((err as { code?: unknown })?.code === '57014' ? new PgStatementTimeout(err) : err),
          ),
      );
    });
  }

  async #run<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[],
    caller: Caller,
    retry: boolean,
  ): Promise<R[]> {
    const client = await this.#pool.connect();
    if (caller.gaveUp) {
      client.release();
      return [];
    }

    let backstop: NodeJS.Timeout | undefined;
    let cancelled = false;
    caller.onGiveUp = () => {
      PG_EVENTS.reads_abandoned++;
      backstop = setTimeout(
        () => {
          cancelled = true;
          this.#cancel(client);
        },
        2 * this.#statementTimeoutMs + 100,
      );
      backstop.unref();
    };
    let broken: Error | undefined;
    try {
      const name = this.#prepared ? statementName(text) : undefined;
      return (await client.query<R>({ text, values, ...(name ? { name } : {}) })).rows;
    } catch (err) {
      if (!isBroken(err)) throw err;
      broken = err as Error;
    } finally {
      caller.onGiveUp = undefined;
      clearTimeout(backstop);
      // A late cancel could hit the next borrower's statement: that connection is not reused.
      client.release(broken ?? cancelled);
    }
    if (retry && !caller.gaveUp) {
      PG_EVENTS.reads_retried++;
      return this.#run(text, values, caller, false);
    }
    throw broken;
  }

  /** One transaction on `schema`, announced at commit when `announce`; @throws after ROLLBACK. */
  async transaction(schema: string, work: PgWork, announce: boolean): Promise<void> {
    const client = await this.#pool.connect();
    try {
      await client.query('BEGIN');
      // Transaction-scoped, so nothing outlives it on a pooled server connection.
      await client.query(announce ? ANNOUNCED : UNANNOUNCED, announce ? [schema, CHANGE_CHANNEL] : [schema]);
      await work(client);
      await client.query('COMMIT');
      client.release();
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release(isBroken(err));
      throw err;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#warmTimer);
    if (!this.#pool.ended && !this.#pool.ending) await this.#pool.end();
  }
}
