/**
 * PostgreSQL store (contract.md §4.3): the embedded store's contract — hot memories, cold search,
 * directives, same hit shape, org/agent scoping and limits — on a database shared by a fleet of replicas.
 *
 * - Connections are long-lived: a bounded node-postgres pool that keeps `poolMin` of them open through
 *   quiet spells (re-opened in the background when the server closes one, never inside a read), so a
 *   read costs one round-trip and no backend start-up.
 * - A read's branch time is the store's own timer: when it fires (or the branch aborts) the read answers
 *   at once, and its statement is left to end on the server under a fixed `statement_timeout` set once per
 *   connection at start-up; then the connection goes back to the pool. No cancel request (each one is a new
 *   connection to the server) and no dropped connection per timeout: under overload those made every next
 *   read slower still. A cancel is sent only as a backstop, for a statement still running well past that
 *   bound (a server where it is not in effect), and that connection is then closed.
 * - A read that fails on a connection-level error (a backend terminated, a server-closed idle
 *   connection) runs once more on another connection: reads are plain SELECTs, safe to repeat.
 * - Hot reads and directives are cached per agent until a write: this process's own at once, other
 *   replicas' through LISTEN/NOTIFY (pg-change-feed.ts). Without a live LISTEN connection reads go through.
 * - Reads are named (prepared once per connection) unless through a transaction pooler.
 * - Statements name their schema, and writes scope theirs with `set_config(…, true)` inside their
 *   transaction: nothing depends on session state, so the store works through a transaction-pooling
 *   PgBouncer (`transactionPooler`; docs/postgres.md).
 * - Cold search: `websearch_to_tsquery('simple', …)` over a `tsvector` (GIN) of words and CJK bigrams
 *   (search-text.ts), ranked by `ts_rank(…, 1|32)`: term frequency over 1 + log(length), then
 *   rank/(rank+1), which is already in [0,1). Not `ts_rank_cd`: cover density
 *   over an OR of terms rewards long memories that hold many of the words anywhere, and on the LoCoMo QA
 *   (1,977 questions with evidence turns) its recall@10 of the evidence was 0.055 (0.138 with length
 *   normalisation) against 0.470 for `ts_rank(…, 1|32)` and 0.567 for the embedded store's BM25
 *   (docs/scaling.md, "Which store when").
 * - Memories longer than the size cap are filtered in SQL on the stored code-point length.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { Errors } from '../../wire/errors.js';
import {
  type FeedbackKind,
  type FeedbackStore,
  INCLUSION_BATCH,
  type InclusionCount,
  type UsefulnessUpdate,
  usefulnessDelta,
} from '../feedback.js';
import { MAX_NEIGHBOUR_HITS, mergeNeighbours, type NeighbourRow, type ScoredRow } from '../neighbours.js';
import { ReadCache } from '../read-cache.js';
import type { DirectiveEnvelope, DirectiveRow, MemoryRow, StoreHit } from '../store-rows.js';
import { checkMemory, type MemoryDbRow as StoreDbRow, toHit, uuidArg } from '../store-rows.js';
import { HOT_LIMIT, SEARCH_LIMIT } from '../validate.js';
import { type MigrateResult, migrate, SCHEMA_NAME_RE } from './migrations.js';
import { CHANGE_CHANNEL, PgChangeFeed } from './pg-change-feed.js';
import { PG_EVENTS } from './pg-stats.js';
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
  /**
   * Connections kept open while idle, opened before `open` resolves and re-opened in the background when
   * one is closed. Default 0; at most `poolMax`.
   */
  poolMin?: number;
  /** Connections above `poolMin` idle this long are closed, ms. Default 30,000. */
  idleTimeoutMs?: number;
  /**
   * Server-side bound of every read statement, ms: the connection's `statement_timeout`, sent once in its
   * start-up packet. An abandoned read holds its connection at most this long. Default 1000. With
   * `transactionPooler` it cannot be sent: set it on the server (ALTER ROLE … SET statement_timeout) to
   * this value, which the store then only uses for its cancel backstop.
   */
  statementTimeoutMs?: number;
  /**
   * Connections go through a transaction-pooling PgBouncer: no start-up options (PgBouncer refuses
   * them), and no LISTEN on `url` (a session feature). Default false.
   */
  transactionPooler?: boolean;
  /**
   * Where the change feed LISTENs (a direct connection, not through a transaction pooler); `''` = no read
   * cache. Default: `url`, or `''` with `transactionPooler`.
   */
  listenUrl?: string;
  /** How long a read waits for a free connection or a new one, ms. Default 1000. */
  connectTimeoutMs?: number;
  /** `application_name` of the connections (pg_stat_activity). Default `ibex-context`. */
  applicationName?: string;
  /** Called for errors of idle connections (e.g. a terminated backend); default: ignored. */
  onIdleError?: (err: Error) => void;
}

/** A read's limits: the branch's time, its signal, and the contract.md §4.1 caps. */
export interface PgReadOptions {
  /** The branch's remaining time, ms: past it the read rejects with {@link PgStatementTimeout}. */
  timeoutMs: number;
  /** Aborted when the branch gives up: the read rejects with the signal's reason at once. */
  signal?: AbortSignal;
  /** Default 20 (hot) / 10 (search). */
  limit?: number;
  /** In [0,1]; default 0. */
  minConfidence?: number;
  /** Memories longer than this many code points are never returned. Default: no cap. */
  maxChars?: number;
  /**
   * Search only: the same statement reads the dialogue neighbours of this many best hits
   * (retrieval/neighbours.ts), 0..20; default 0, the plain text search.
   */
  neighbours?: number;
}

/** A `memories` row as `pg` returns it: the embedded store's row, with `created_at` a Date. */
type MemoryDbRow = Omit<StoreDbRow, 'content' | 'created_at'> & { content: string; created_at: Date };

/** A read the store abandoned because it ran past its time (client-side timer or server statement_timeout). */
export class PgStatementTimeout extends Error {
  constructor(cause?: unknown) {
    super('statement timeout', { cause });
    this.name = 'PgStatementTimeout';
  }
}

const COLUMNS = 'id, org_id, agent_id, content, category, confidence, created_at, usefulness, inclusions';
const NO_CAP = 2_147_483_647;
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

/** PostgreSQL-backed memory and directive store. Not usable after {@link close}. */
export class PgStore implements FeedbackStore {
  /** Schema in use. */
  readonly schema: string;
  /** What opening migrated. */
  readonly migration: MigrateResult;
  readonly #pool: pg.Pool;
  readonly #server: { host: string; port: number };
  readonly #min: number;
  readonly #statementTimeoutMs: number;
  /** Named (server-side prepared) read statements: each connection parses and plans them once. */
  readonly #prepared: boolean;
  readonly #feed: PgChangeFeed | undefined;
  readonly #hotCache: ReadCache<readonly StoreHit[]> | undefined;
  readonly #directiveCache: ReadCache<DirectiveEnvelope | null> | undefined;
  readonly #warmTimer: NodeJS.Timeout;
  #warming = false;
  #closed = false;

  private constructor(
    pool: pg.Pool,
    schema: string,
    migration: MigrateResult,
    server: { host: string; port: number },
    o: { min: number; statementTimeoutMs: number; prepared: boolean; feed: PgChangeFeed | undefined },
  ) {
    this.#pool = pool;
    this.schema = schema;
    this.migration = migration;
    this.#server = server;
    this.#min = o.min;
    this.#statementTimeoutMs = o.statementTimeoutMs;
    this.#prepared = o.prepared;
    this.#feed = o.feed;
    if (o.feed) {
      this.#hotCache = new ReadCache(o.feed);
      this.#directiveCache = new ReadCache(o.feed);
    }
    pool.on('remove', () => this.#topUp());
    this.#warmTimer = setInterval(() => this.#topUp(), WARM_CHECK_MS);
    this.#warmTimer.unref();
  }

  /**
   * Connects, creates the schema and applies pending migrations (under an advisory lock), opens
   * `poolMin` connections and starts the change feed.
   * @throws Error for a bad schema name; the connection or migration error (pool closed).
   */
  static async open(opts: PgStoreOptions): Promise<PgStore> {
    const schema = opts.schema ?? 'ibex_context';
    if (!SCHEMA_NAME_RE.test(schema)) throw new Error(`invalid PostgreSQL schema name: ${schema}`);
    const max = opts.poolMax ?? 8;
    const min = Math.min(max, opts.poolMin ?? 0);
    const statementTimeoutMs = Math.max(1, Math.ceil(opts.statementTimeoutMs ?? 1000));
    const pooler = opts.transactionPooler ?? false;
    const applicationName = opts.applicationName ?? 'ibex-context';
    const config: pg.PoolConfig = {
      connectionString: opts.url,
      max,
      min,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 1000,
      idleTimeoutMillis: opts.idleTimeoutMs ?? 30_000,
      application_name: applicationName,
      // Set once per connection, never per read: no round-trip, and no session SET a pooler could lose.
      ...(pooler ? {} : { options: `-c statement_timeout=${statementTimeoutMs}` }),
      keepAlive: true,
    };
    const pool = new pg.Pool(config);
    pool.on('connect', (client) => {
      PG_EVENTS.connections_opened++;
      // The pool listens for errors only on idle connections; a server's FATAL (terminated backend,
      // restart) can reach one that is checked out between statements. Its reads see the error anyway,
      // and the pool drops a connection that is no longer queryable when it comes back.
      client.on('error', () => undefined);
    });
    pool.on('remove', () => PG_EVENTS.connections_closed++);
    // Without a listener an idle connection's error (terminated backend, restart) would crash the process.
    pool.on('error', (err) => opts.onIdleError?.(err));
    let feed: PgChangeFeed | undefined;
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
      const listenUrl = opts.listenUrl ?? (pooler ? '' : opts.url);
      if (listenUrl !== '') feed = await PgChangeFeed.start(listenUrl, schema, applicationName);
      const store = new PgStore(
        pool,
        schema,
        migration,
        { host: probe.host, port: probe.port },
        // A transaction pooler may run a read on a server connection that never saw its PREPARE
        // (PgBouncer before 1.21, or without max_prepared_statements).
        { min, statementTimeoutMs, prepared: !pooler, feed },
      );
      await store.warm();
      return store;
    } catch (err) {
      await feed?.close();
      await pool.end().catch(() => undefined);
      throw err;
    }
  }

  /** Pool counters, for /readyz and tests. */
  poolStats(): { total: number; idle: number; waiting: number } {
    return { total: this.#pool.totalCount, idle: this.#pool.idleCount, waiting: this.#pool.waitingCount };
  }

  /** Whether hot reads and directives are being served from the cache now (a live change feed). */
  get caching(): boolean {
    return this.#feed?.live ?? false;
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
  #read<R extends pg.QueryResultRow>(
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
   * The agent's most recent memories, then highest confidence, then id (contract.md §4.3).
   * @param orgId org to scope to; `null` = every org (the memory wire, which has no org).
   * @returns wire-shaped hits, `rank` 1..n, `similarity = confidence`, `source = "hot"`.
   * @throws IbexError INVALID_ARGUMENT for a non-UUID id; read errors as `#read`.
   */
  async hot(orgId: string | null, agentId: string, opts: PgReadOptions): Promise<StoreHit[]> {
    const agent = uuidArg('agent_id', agentId);
    const org = orgId === null ? null : uuidArg('org_id', orgId);
    const minConfidence = opts.minConfidence ?? 0;
    const maxChars = opts.maxChars ?? NO_CAP;
    const limit = opts.limit ?? HOT_LIMIT;
    const cache = this.caching ? this.#hotCache : undefined;
    const key = `${org ?? '*'} ${agent} ${minConfidence} ${maxChars} ${limit}`;
    const cached = cache?.peek(key);
    if (cached !== undefined) return [...cached];
    const generation = cache?.generation ?? 0;
    const rows = await this.#read<MemoryDbRow>(
      `SELECT ${COLUMNS} FROM ${this.schema}.memories
       WHERE agent_id = $1 AND ($2::uuid IS NULL OR org_id = $2) AND confidence >= $3 AND content_chars <= $4
       ORDER BY created_at DESC, confidence DESC, id LIMIT $5`,
      [agent, org, minConfidence, maxChars, limit],
      opts.timeoutMs,
      opts.signal,
    );
    const hits = rows.map((row, i) => toHit(row, row.confidence, i + 1, 'hot'));
    cache?.put(key, hits, generation);
    return [...hits];
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
    const neighbours = opts.neighbours ?? 0;
    if (!Number.isSafeInteger(neighbours) || neighbours < 0 || neighbours > MAX_NEIGHBOUR_HITS) {
      throw Errors.invalidArgument(
        'neighbours',
        `neighbours must be an integer in [0, ${MAX_NEIGHBOUR_HITS}]`,
      );
    }
    if (neighbours > 0) return this.#searchWithNeighbours(terms, agent, org, opts, neighbours);
    const rows = await this.#read<MemoryDbRow & { score: number }>(
      `SELECT ${COLUMNS}, ts_rank(search, q, 1|32) AS score
       FROM ${this.schema}.memories, websearch_to_tsquery('simple', $1) AS q
       WHERE search @@ q AND agent_id = $2 AND ($3::uuid IS NULL OR org_id = $3)
         AND confidence >= $4 AND content_chars <= $5
       ORDER BY score DESC, id LIMIT $6`,
      [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, opts.limit ?? SEARCH_LIMIT],
      opts.timeoutMs,
      opts.signal,
    );
    return rows.map((row, i) => toHit(row, Math.min(1, Math.max(0, row.score)), i + 1, 'fts'));
  }

  /**
   * {@link search} with the dialogue neighbours of the best `parents` hits, in one statement (one round
   * trip): each neighbour is one index seek in the recency indexes, in the search's scope and filters and
   * of its hit's category. x = s/(1−s) of ts_rank's s = rank/(rank+1) is the rank itself, which
   * neighbours.ts shares out; the merged hits map back with s = x/(1+x).
   */
  async #searchWithNeighbours(
    terms: string,
    agent: string,
    org: string | null,
    opts: PgReadOptions,
    parents: number,
  ): Promise<StoreHit[]> {
    const limit = opts.limit ?? SEARCH_LIMIT;
    const scope = `agent_id = $2 AND ($3::uuid IS NULL OR org_id = $3) AND confidence >= $4 AND content_chars <= $5`;
    const n = COLUMNS.split(', ')
      .map((c) => `n.${c}`)
      .join(', ');
    const rows = await this.#read<
      MemoryDbRow & { score: number | null; parent: number | null; next: boolean | null }
    >(
      `WITH hits AS (
         SELECT ${COLUMNS}, ts_rank(search, q, 1|32) AS score
         FROM ${this.schema}.memories, websearch_to_tsquery('simple', $1) AS q
         WHERE search @@ q AND ${scope}
         ORDER BY score DESC, id LIMIT $6),
       top AS (
         SELECT created_at AS at, category AS cat,
                (row_number() OVER (ORDER BY score DESC, id))::int - 1 AS parent
         FROM hits ORDER BY score DESC, id LIMIT $7)
       SELECT ${COLUMNS}, score, NULL::int AS parent, NULL::boolean AS next FROM hits
       UNION ALL
       SELECT ${n}, n.score, top.parent, n.next FROM top CROSS JOIN LATERAL (
         (SELECT ${COLUMNS}, NULL::real AS score, true AS next FROM ${this.schema}.memories
          WHERE ${scope} AND category = top.cat AND created_at > top.at ORDER BY created_at, id LIMIT 1)
         UNION ALL
         (SELECT ${COLUMNS}, NULL::real AS score, false AS next FROM ${this.schema}.memories
          WHERE ${scope} AND category = top.cat AND created_at < top.at ORDER BY created_at DESC, id LIMIT 1)
       ) n`,
      [terms, agent, org, opts.minConfidence ?? 0, opts.maxChars ?? NO_CAP, limit, parents],
      opts.timeoutMs,
      opts.signal,
    );
    const hits: ScoredRow<MemoryDbRow>[] = [];
    const near: NeighbourRow<MemoryDbRow>[] = [];
    for (const { score, parent, next, ...row } of rows) {
      if (parent === null) {
        const s = Math.min(1, Math.max(0, score ?? 0));
        hits.push({ row, x: s >= 1 ? Number.MAX_VALUE : s / (1 - s) });
      } else near.push({ row, parent, next: next === true });
    }
    // The order `top` numbered its parents by (ts_rank's float4 as a double is exact).
    hits.sort((a, b) => b.x - a.x || (a.row.id < b.row.id ? -1 : a.row.id > b.row.id ? 1 : 0));
    return mergeNeighbours(hits, near, limit).map(({ row, x }, i) =>
      toHit(row, x === Number.MAX_VALUE ? 1 : x / (1 + x), i + 1, 'fts'),
    );
  }

  /** The stored directive as a contract.md §4.2 envelope, or `null` when none is stored. Throws as `#read`. */
  async getDirective(
    orgId: string,
    agentId: string,
    opts: Pick<PgReadOptions, 'timeoutMs' | 'signal'>,
  ): Promise<DirectiveEnvelope | null> {
    const org = uuidArg('org_id', orgId);
    const agent = uuidArg('agent_id', agentId);
    const cache = this.caching ? this.#directiveCache : undefined;
    const key = `${org} ${agent}`;
    const cached = cache?.peek(key);
    if (cached !== undefined) return cached;
    const generation = cache?.generation ?? 0;
    const rows = await this.#read<{ content: string | null; injection_mode: string; version_id: string }>(
      `SELECT content, injection_mode, version_id FROM ${this.schema}.directives WHERE org_id = $1 AND agent_id = $2`,
      [org, agent],
      opts.timeoutMs,
      opts.signal,
    );
    const row = rows[0];
    const envelope =
      row === undefined
        ? null
        : {
            v: 1 as const,
            content: row.content,
            injection_mode: row.injection_mode,
            version_id: row.version_id,
          };
    cache?.put(key, envelope, generation);
    return envelope;
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

  /**
   * RecordMemoryFeedback on this store (contract.md §7a): one statement in one transaction, scoped by
   * `org_id` in SQL. The rows are locked before their old value is read, so concurrent feedback on one
   * memory (from any replica) applies every step; they are locked in id order, so two calls naming the
   * same memories in different orders wait for each other rather than deadlock.
   * @param orgId canonical lower-case UUID.
   * @param memoryIds canonical lower-case UUIDs, distinct.
   * @returns the org's memories among `memoryIds`, in that order, with their usefulness before and after.
   */
  async recordFeedback(
    orgId: string,
    memoryIds: readonly string[],
    kind: FeedbackKind,
  ): Promise<UsefulnessUpdate[]> {
    const org = uuidArg('org_id', orgId);
    let rows: { id: string; previous: number; current: number }[] = [];
    await this.#transaction(async (client) => {
      const r = await client.query<{ id: string; previous: number; current: number }>(
        `WITH prev AS (
           SELECT id, usefulness FROM memories WHERE org_id = $1 AND id = ANY($2::uuid[])
           ORDER BY id FOR UPDATE)
         UPDATE memories m SET usefulness = LEAST(1, GREATEST(0, prev.usefulness + $3))
         FROM prev WHERE m.id = prev.id
         RETURNING m.id, prev.usefulness AS previous, m.usefulness AS current`,
        [org, memoryIds, usefulnessDelta(kind)],
      );
      rows = r.rows;
    });
    const byId = new Map(rows.map((r) => [r.id, r]));
    const updates: UsefulnessUpdate[] = [];
    for (const id of memoryIds) {
      const r = byId.get(id);
      if (r !== undefined) updates.push({ memoryId: id, previous: r.previous, current: r.current });
    }
    return updates;
  }

  /**
   * Adds inclusion counts in one statement (at most {@link INCLUSION_BATCH} rows). Like every write it
   * tells the replicas' read caches (pg-change-feed.ts), so their hot reads carry the new counts.
   * @returns rows updated.
   */
  async addInclusions(rows: readonly InclusionCount[]): Promise<number> {
    if (rows.length === 0) return 0;
    if (rows.length > INCLUSION_BATCH) throw new RangeError(`at most ${INCLUSION_BATCH} rows per batch`);
    let changed = 0;
    await this.#transaction(async (client) => {
      const r = await client.query(
        `UPDATE memories m SET inclusions = LEAST(2147483647, m.inclusions::bigint + c.n)
         FROM unnest($1::uuid[], $2::uuid[], $3::integer[]) AS c(id, org, n)
         WHERE m.id = c.id AND m.org_id = c.org`,
        [rows.map((r) => r.memoryId), rows.map((r) => r.orgId), rows.map((r) => r.count)],
      );
      changed = r.rowCount ?? 0;
    });
    return changed;
  }

  /** Row counts, for ingest summaries and tests. */
  async counts(): Promise<{ memories: number; directives: number; agents: number }> {
    const r = await this.#pool.query<{ m: string; a: string; d: string }>(
      `SELECT (SELECT count(*) FROM ${this.schema}.memories) AS m,
              (SELECT count(*) FROM (SELECT DISTINCT org_id, agent_id FROM ${this.schema}.memories) s) AS a,
              (SELECT count(*) FROM ${this.schema}.directives) AS d`,
    );
    const row = r.rows[0]!;
    return { memories: Number(row.m), agents: Number(row.a), directives: Number(row.d) };
  }

  /**
   * Refreshes the planner's statistics of the tables (after a bulk import: the cold search's plan
   * depends on them).
   */
  async analyze(): Promise<void> {
    await this.#pool.query(`ANALYZE ${this.schema}.memories, ${this.schema}.directives`);
  }

  async #transaction(work: (client: pg.PoolClient) => Promise<void>): Promise<void> {
    const client = await this.#pool.connect();
    try {
      await client.query('BEGIN');
      // Transaction-scoped, so nothing outlives it on a pooled server connection: the writes' unqualified
      // names, and no read-sized statement_timeout for a write.
      await client.query(
        "SELECT set_config('search_path', $1, true), set_config('statement_timeout', '0', true), pg_notify($2, $1)",
        [this.schema, CHANGE_CHANNEL],
      );
      await work(client);
      await client.query('COMMIT');
      client.release();
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release(isBroken(err));
      throw err;
    } finally {
      this.#feed?.noteWrite();
    }
  }

  /** Closes every connection; idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#warmTimer);
    await this.#feed?.close();
    if (!this.#pool.ended && !this.#pool.ending) await this.#pool.end();
  }
}
