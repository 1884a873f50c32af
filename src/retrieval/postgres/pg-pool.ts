/**
 * The PostgreSQL store's connections (pg-store.ts): a bounded node-postgres pool kept warm to `min`
 * connections, reads under the branch's time (abandoned, not cancelled, when it runs out; retried once on
 * a connection-level error), and write transactions scoped by `set_config(…, true)`.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { CHANGE_CHANNEL } from './pg-change-feed.js';
import { PG_EVENTS } from './pg-stats.js';

/** A read the store abandoned because it ran past its time (client-side timer or server statement_timeout). */
export class PgStatementTimeout extends Error {
  constructor(cause?: unknown) {
    super('statement timeout', { cause });
    this.name = 'PgStatementTimeout';
  }
}

/** How often the pool is topped up to `poolMin` when nothing else prompted it (e.g. the server was down). */
const WARM_CHECK_MS = 1000;

/** A read's caller: whether it stopped waiting (its time ran out or it aborted) or was answered. */
interface Caller {
  gaveUp: boolean;
  answered?: boolean;
  /** Set while the statement runs: called once when the caller stops waiting. */
  onGiveUp?: () => void;
}

/** The name of a read statement's server-side prepared form: stable per text (which names the schema). */
function statementName(text: string): string {
  let name = STATEMENT_NAMES.get(text);
  if (name === undefined) {
    name = `ibex_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
    STATEMENT_NAMES.set(text, name);
  }
  return name;
}
const STATEMENT_NAMES = new Map<string, string>();

/** A connection-level failure: the connection is gone, the statement did not complete. */
function isBroken(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string' && (code.startsWith('57P') || code.startsWith('08') || code.startsWith('E')))
    return true;
  return err instanceof Error && /Connection terminated|not queryable/i.test(err.message);
}

/** How {@link PgPool} opens its connections. */
export interface PgPoolOptions {
  /** node-postgres pool settings (URL, sizes, timeouts, start-up options). */
  config: pg.PoolConfig;
  /** Connections kept open while idle. */
  min: number;
  /** The server-side bound of a read, ms (the cancel backstop waits twice this). */
  statementTimeoutMs: number;
  /** Named (server-side prepared) read statements: each connection parses and plans them once. */
  prepared: boolean;
  /** Called for errors of idle connections. */
  onIdleError?: (err: Error) => void;
}

/** A write transaction's start: its scope, and the NOTIFY that empties the replicas' read caches. */
const ANNOUNCED =
  "SELECT set_config('search_path', $1, true), set_config('statement_timeout', '0', true), pg_notify($2, $1)";
/** The same without the NOTIFY, for a write no cached read needs to see at once (inclusion counts). */
const UNANNOUNCED = "SELECT set_config('search_path', $1, true), set_config('statement_timeout', '0', true)";

/** A write transaction's body, on the transaction's connection. */
export type PgWork = (client: pg.PoolClient) => Promise<void>;

/** The store's pool: reads under a time limit, write transactions, keep-warm. Not usable after {@link close}. */
export class PgPool {
  readonly #pool: pg.Pool;
  readonly #server: { host: string; port: number };
  readonly #min: number;
  readonly #statementTimeoutMs: number;
  readonly #prepared: boolean;
  readonly #warmTimer: NodeJS.Timeout;
  #warming = false;
  #closed = false;

  /** Creates the pool (no connection yet: {@link warm} or the first read opens them). */
  constructor(o: PgPoolOptions) {
    const pool = new pg.Pool(o.config);
    pool.on('connect', (client) => {
      PG_EVENTS.connections_opened++;
      // The pool listens for errors only on idle connections; a server's FATAL (terminated backend,
      // restart) can reach one that is checked out between statements. Its reads see the error anyway,
      // and the pool drops a connection that is no longer queryable when it comes back.
      client.on('error', () => undefined);
    });
    pool.on('remove', () => PG_EVENTS.connections_closed++);
    // Without a listener an idle connection's error (terminated backend, restart) would crash the process.
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

  /** A connection of the pool, for work outside reads and transactions (migrations); release it. */
  connect(): Promise<pg.PoolClient> {
    return this.#pool.connect();
  }

  /** One statement on any pooled connection, without the read's time limit (counts, ANALYZE). */
  async query<R extends pg.QueryResultRow>(text: string): Promise<R[]> {
    return (await this.#pool.query<R>(text)).rows;
  }

  /** Pool counters, for /readyz and tests. */
  poolStats(): { total: number; idle: number; waiting: number } {
    return { total: this.#pool.totalCount, idle: this.#pool.idleCount, waiting: this.#pool.waitingCount };
  }

  /**
   * Opens connections until `poolMin` are open; resolves when they are (or failed to open: the periodic
   * check tries again). Runs by itself in the background; exposed for start-up and tests.
   */
  async warm(): Promise<void> {
    const missing = this.#min - this.#pool.totalCount;
    if (missing <= 0 || this.#warming || this.#closed || this.#pool.waitingCount > 0) return;
    this.#warming = true;
    try {
      // The pool opens a connection only when none is idle: hold the idle ones until the new ones are in.
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

  /** PostgreSQL's cancel request for `client`'s running statement, on a short-lived connection. */
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
   * Runs one read under the branch's time: rejects with {@link PgStatementTimeout} once `timeoutMs` has
   * passed, with the signal's reason once it aborts, at once either way. The statement itself runs on to
   * its end (at most the server-side statement_timeout) and then returns its connection to the pool.
   * @throws PgStatementTimeout past the time; the signal's reason once aborted; pg errors otherwise.
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

  /** One statement on a pooled connection for `caller`; retried once on a connection-level error. */
  async #run<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[],
    caller: Caller,
    retry: boolean,
  ): Promise<R[]> {
    const client = await this.#pool.connect();
    // Waiting for a connection may have outlasted the branch: then run nothing.
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
      // A cancel sent late could hit the next borrower's statement: that connection is not reused.
      client.release(broken ?? cancelled);
    }
    if (retry && !caller.gaveUp) {
      PG_EVENTS.reads_retried++;
      return this.#run(text, values, caller, false);
    }
    throw broken;
  }

  /**
   * Runs `work` in one transaction with the store's schema as its search path and no statement timeout,
   * announcing the write on the change feed's channel (delivered at commit) when `announce` is true.
   * @throws the statement's error, after ROLLBACK (the connection is dropped when it broke).
   */
  async transaction(schema: string, work: PgWork, announce: boolean): Promise<void> {
    const client = await this.#pool.connect();
    try {
      await client.query('BEGIN');
      // Transaction-scoped, so nothing outlives it on a pooled server connection: the writes' unqualified
      // names, and no read-sized statement_timeout for a write.
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

  /** Stops the keep-warm and closes every connection; idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#warmTimer);
    if (!this.#pool.ended && !this.#pool.ending) await this.#pool.end();
  }
}
