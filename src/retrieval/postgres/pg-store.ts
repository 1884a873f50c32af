/**
 * PostgreSQL store (contract.md §4.3): the embedded store's contract — hot memories, cold search,
 * directives, same hit shape, org/agent scoping and limits — on a database shared by a fleet of replicas.
 *
 * - Reads go through a bounded node-postgres pool. Each read carries its branch's time: the connection's
 *   `statement_timeout` is set to it (only when it differs from the value the connection already has), and
 *   an abort sends PostgreSQL's cancel request for the running statement, then drops that connection (a
 *   late cancel must not hit the next borrower's statement). A slow database thus costs the branch, never
 *   the process.
 * - Cold search: `websearch_to_tsquery('simple', …)` over a `tsvector` (GIN) of words and CJK bigrams
 *   (search-text.ts), ranked by `ts_rank(…, 1|32)`: term frequency over 1 + log(length), then
 *   rank/(rank+1), which is already in [0,1). Not `ts_rank_cd`: cover density
 *   over an OR of terms rewards long memories that hold many of the words anywhere, and on the LoCoMo QA
 *   (1,977 questions with evidence turns) its recall@10 of the evidence was 0.055 (0.138 with length
 *   normalisation) against 0.470 for `ts_rank(…, 1|32)` and 0.567 for the embedded store's BM25
 *   (docs/scaling.md, "Which store when").
 * - Memories longer than the size cap are filtered in SQL on the stored code-point length.
 */
import pg from 'pg';
import { Errors } from '../../errors.js';
import type { DirectiveEnvelope, DirectiveRow, MemoryRow, StoreHit } from '../embedded-store.js';
import { checkMemory, type MemoryDbRow as StoreDbRow, toHit, uuidArg } from '../store-rows.js';
import { HOT_LIMIT, SEARCH_LIMIT } from '../validate.js';
import { type MigrateResult, migrate, SCHEMA_NAME_RE } from './migrations.js';
import { insertMemories, upsertDirective } from './pg-writes.js';
import { toWebSearchQuery } from './search-text.js';

/** Options of {@link PgStore.open}. */
export interface PgStoreOptions {
  /** `postgres://…` connection URL; never logged (it may hold a password). */
  url: string;
  /** Schema holding the tables; created at open. Default `ibex_context`. */
  schema?: string;
  /** Most connections this process opens. Default 8. */
  poolMax?: number;
  /** How long a read waits for a free connection or a new one, ms. Default 1000. */
  connectTimeoutMs?: number;
  /** `application_name` of the connections (pg_stat_activity). Default `ibex-context`. */
  applicationName?: string;
  /** Called for errors of idle connections (e.g. a terminated backend); default: ignored. */
  onIdleError?: (err: Error) => void;
}

/** A read's limits: the branch's time, its signal, and the contract.md §4.1 caps. */
export interface PgReadOptions {
  /** The branch's remaining time, ms; becomes the statement's `statement_timeout`. */
  timeoutMs: number;
  /** Aborted when the branch gives up: the statement is cancelled. */
  signal?: AbortSignal;
  /** Default 20 (hot) / 10 (search). */
  limit?: number;
  /** In [0,1]; default 0. */
  minConfidence?: number;
  /** Memories longer than this many code points are never returned. Default: no cap. */
  maxChars?: number;
}

/** A `memories` row as `pg` returns it: the embedded store's row, with `created_at` a Date. */
type MemoryDbRow = Omit<StoreDbRow, 'content' | 'created_at'> & { content: string; created_at: Date };

/** A read the store abandoned because its statement ran past `statement_timeout`. */
export class PgStatementTimeout extends Error {
  constructor(cause: unknown) {
    super('statement timeout', { cause });
    this.name = 'PgStatementTimeout';
  }
}

const COLUMNS = 'id, org_id, agent_id, content, category, confidence, created_at';
const NO_CAP = 2_147_483_647;

function isBroken(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string' && (code.startsWith('57P') || code.startsWith('08') || code.startsWith('E')))
    return true;
  return err instanceof Error && /Connection terminated|not queryable/i.test(err.message);
}

/** PostgreSQL-backed memory and directive store. Not usable after {@link close}. */
export class PgStore {
  /** Schema in use. */
  readonly schema: string;
  /** What opening migrated. */
  readonly migration: MigrateResult;
  readonly #pool: pg.Pool;
  readonly #server: { host: string; port: number };
  /** statement_timeout (ms) last set on each connection, so an unchanged value costs no round trip. */
  readonly #timeouts = new WeakMap<pg.PoolClient, number>();

  private constructor(
    pool: pg.Pool,
    schema: string,
    migration: MigrateResult,
    server: { host: string; port: number },
  ) {
    this.#pool = pool;
    this.schema = schema;
    this.migration = migration;
    this.#server = server;
  }

  /**
   * Connects, creates the schema and applies pending migrations (under an advisory lock).
   * @throws Error for a bad schema name; the connection or migration error (pool closed).
   */
  static async open(opts: PgStoreOptions): Promise<PgStore> {
    const schema = opts.schema ?? 'ibex_context';
    if (!SCHEMA_NAME_RE.test(schema)) throw new Error(`invalid PostgreSQL schema name: ${schema}`);
    const config: pg.PoolConfig = {
      connectionString: opts.url,
      max: opts.poolMax ?? 8,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 1000,
      idleTimeoutMillis: 30_000,
      options: `-c search_path=${schema}`,
      application_name: opts.applicationName ?? 'ibex-context',
    };
    const pool = new pg.Pool(config);
    // Without a listener an idle connection's error (terminated backend, restart) would crash the process.
    pool.on('error', (err) => opts.onIdleError?.(err));
    try {
      const client = await pool.connect();
      let migration: MigrateResult;
      try {
        migration = await migrate(client, schema);
      } finally {
        client.release();
      }
      const probe = new pg.Client({ connectionString: opts.url }) as unknown as {
        host: string;
        port: number;
      };
      return new PgStore(pool, schema, migration, { host: probe.host, port: probe.port });
    } catch (err) {
      await pool.end().catch(() => undefined);
      throw err;
    }
  }

  /** Pool counters, for /readyz and tests. */
  poolStats(): { total: number; idle: number; waiting: number } {
    return { total: this.#pool.totalCount, idle: this.#pool.idleCount, waiting: this.#pool.waitingCount };
  }

  /** PostgreSQL's cancel request for `client`'s running statement, on a short-lived connection. */
  #cancel(client: pg.PoolClient): void {
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
   * Runs one read with the branch's time as `statement_timeout`, cancelled when `signal` aborts.
   * @throws PgStatementTimeout past the timeout; the signal's reason once aborted; pg errors otherwise.
   */
  async #read<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[],
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<R[]> {
    signal?.throwIfAborted();
    const client = await this.#pool.connect();
    let drop = false;
    let onAbort: (() => void) | undefined;
    try {
      // Waiting for a connection may have outlasted the branch: then run nothing.
      signal?.throwIfAborted();
      const ms = Math.max(1, Math.ceil(timeoutMs));
      if (this.#timeouts.get(client) !== ms) {
        this.#timeouts.delete(client);
        await client.query("SELECT set_config('statement_timeout', $1, false)", [String(ms)]);
        this.#timeouts.set(client, ms);
      }
      signal?.throwIfAborted();
      const result = client.query<R>(text, values);
      onAbort = () => {
        drop = true;
        this.#cancel(client);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      return (await result).rows;
    } catch (err) {
      if (isBroken(err)) drop = true;
      if ((err as { code?: unknown })?.code === '57014' && !signal?.aborted)
        throw new PgStatementTimeout(err);
      throw signal?.aborted ? signal.reason : err;
    } finally {
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      client.release(drop);
    }
  }

  /**
   * The agent's most recent memories, then highest confidence, then id (contract.md §4.3).
   * @param orgId org to scope to; `null` = every org (the memory wire, which has no org).
   * @returns wire-shaped hits, `rank` 1..n, `similarity = confidence`, `source = "hot"`.
   * @throws IbexError INVALID_ARGUMENT for a non-UUID id; read errors as `#read`.
   */
  async hot(orgId: string | null, agentId: string, opts: PgReadOptions): Promise<StoreHit[]> {
    const agent = uuidArg('agent_id', agentId);
    const org = orgId === null ? null : uuidArg('org_id', orgId);
    const rows = await this.#read<MemoryDbRow>(
      `SELECT ${COLUMNS} FROM memories
       WHERE agent_id = $1 AND ($2::uuid IS NULL OR org_id = $2) AND confidence >= $3 AND content_chars <= $4
       ORDER BY created_at DESC, confidence DESC, id LIMIT $5`,
      [agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, opts.limit ?? HOT_LIMIT],
      opts.timeoutMs,
      opts.signal,
    );
    return rows.map((row, i) => toHit(row, row.confidence, i + 1, 'hot'));
  }

  /**
   * Full-text search over the agent's memories, best `ts_rank` first (contract.md §4.3). Any text is
   * accepted: it is reduced to plain terms by `toWebSearchQuery`, so it is never syntax.
   * @returns wire-shaped hits, `rank` 1..n, `similarity = ts_rank(…, 1|32)` in [0,1), `source = "fts"`;
   *   `[]` without a query to the database when the text has no searchable term.
   */
  async search(
    orgId: string | null,
    agentId: string,
    query: string,
    opts: PgReadOptions,
  ): Promise<StoreHit[]> {
    const agent = uuidArg('agent_id', agentId);
    const org = orgId === null ? null : uuidArg('org_id', orgId);
    const terms = toWebSearchQuery(query);
    if (terms === null) return [];
    const rows = await this.#read<MemoryDbRow & { score: number }>(
      `SELECT ${COLUMNS}, ts_rank(search, q, 1|32) AS score
       FROM memories, websearch_to_tsquery('simple', $1) AS q
       WHERE search @@ q AND agent_id = $2 AND ($3::uuid IS NULL OR org_id = $3)
         AND confidence >= $4 AND content_chars <= $5
       ORDER BY score DESC, id LIMIT $6`,
      [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, opts.limit ?? SEARCH_LIMIT],
      opts.timeoutMs,
      opts.signal,
    );
    return rows.map((row, i) => toHit(row, Math.min(1, Math.max(0, row.score)), i + 1, 'fts'));
  }

  /** The stored directive as a contract.md §4.2 envelope, or `null` when none is stored. Throws as `#read`. */
  async getDirective(
    orgId: string,
    agentId: string,
    opts: Pick<PgReadOptions, 'timeoutMs' | 'signal'>,
  ): Promise<DirectiveEnvelope | null> {
    const rows = await this.#read<{ content: string | null; injection_mode: string; version_id: string }>(
      'SELECT content, injection_mode, version_id FROM directives WHERE org_id = $1 AND agent_id = $2',
      [uuidArg('org_id', orgId), uuidArg('agent_id', agentId)],
      opts.timeoutMs,
      opts.signal,
    );
    const row = rows[0];
    if (row === undefined) return null;
    return { v: 1, content: row.content, injection_mode: row.injection_mode, version_id: row.version_id };
  }

  /**
   * Replaces one org+agent's memories (and directive when given) in one transaction: re-running an
   * import is idempotent and readers never see a half-written agent.
   * @throws IbexError INVALID_ARGUMENT for a bad id/confidence/created_at or a row of another org/agent.
   */
  async replaceAgent(
    orgId: string,
    agentId: string,
    rows: readonly MemoryRow[],
    directive?: DirectiveRow,
  ): Promise<number> {
    const org = uuidArg('org_id', orgId);
    const agent = uuidArg('agent_id', agentId);
    const clean = rows.map(checkMemory);
    for (const row of clean) {
      if (row.org_id !== org || row.agent_id !== agent)
        throw Errors.invalidArgument('agent_id', `memory ${row.id} is not of org ${org} agent ${agent}`);
    }
    await this.#transaction(async (client) => {
      await client.query('DELETE FROM memories WHERE org_id = $1 AND agent_id = $2', [org, agent]);
      await insertMemories(client, clean);
      if (directive !== undefined) await upsertDirective(client, directive);
    });
    return clean.length;
  }

  /** Inserts or replaces memories by id, in one transaction. Throws as {@link replaceAgent}. */
  async upsertMemories(rows: readonly MemoryRow[]): Promise<number> {
    const clean = rows.map(checkMemory);
    await this.#transaction((client) => insertMemories(client, clean));
    return clean.length;
  }

  /** Stores (or replaces) one directive; values as given, contract.md §4.2 applies on read. */
  async setDirective(directive: DirectiveRow): Promise<void> {
    await this.#transaction((client) => upsertDirective(client, directive));
  }

  /** Row counts, for ingest summaries and tests. */
  async counts(): Promise<{ memories: number; directives: number; agents: number }> {
    const r = await this.#pool.query<{ m: string; a: string; d: string }>(
      `SELECT (SELECT count(*) FROM memories) AS m,
              (SELECT count(*) FROM (SELECT DISTINCT org_id, agent_id FROM memories) s) AS a,
              (SELECT count(*) FROM directives) AS d`,
    );
    const row = r.rows[0]!;
    return { memories: Number(row.m), agents: Number(row.a), directives: Number(row.d) };
  }

  async #transaction(work: (client: pg.PoolClient) => Promise<void>): Promise<void> {
    const client = await this.#pool.connect();
    // Writes are not under a branch's deadline: lift a read's statement_timeout for this connection.
    this.#timeouts.delete(client);
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL statement_timeout = 0');
      await work(client);
      await client.query('COMMIT');
      client.release();
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release(isBroken(err));
      throw err;
    }
  }

  /** Closes every connection; idempotent. */
  async close(): Promise<void> {
    if (!this.#pool.ended) await this.#pool.end();
  }
}
