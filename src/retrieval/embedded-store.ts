/**
 * Embedded store (SPEC §4.3): SQLite through better-sqlite3, WAL mode, FTS5 for text search. It serves
 * hot memories, cold search and directives when no memory service / Redis is configured, and backs the
 * dev memory server (`ibex-context memory-server`) and LoCoMo ingest.
 *
 * Calls are synchronous: each query is an indexed lookup or an FTS5 match over one agent's rows, well
 * under a millisecond at dev sizes, so a worker hop would cost more than it saves. Statements are
 * prepared once in the constructor.
 *
 * Similarity (documented contract of this store):
 * - hot: `similarity = confidence` (a hot read has no query to be similar to; this keeps the interim
 *   score `0.85·s + 0.15·c` equal to the confidence), `source = "hot"`.
 * - cold: x = −bm25 (FTS5's bm25 is ≤ 0, more negative = better), `similarity = x / (1 + x)`, a
 *   monotonic map of [0, ∞) onto [0, 1); `source = "fts"`.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Errors } from '../errors.js';
import { toFtsQuery } from './fts-query.js';
import { canonicalUuid } from './uuid.js';
import { HOT_LIMIT, SEARCH_LIMIT } from './validate.js';

/** A memory to write. */
export interface MemoryRow {
  /** UUID; stored lower-case. Upserting an existing id replaces that memory. */
  id: string;
  org_id: string;
  agent_id: string;
  content: string;
  /** e.g. `episodic`, `factual`. */
  category: string;
  /** In [0,1]. */
  confidence: number;
  /** Epoch milliseconds; hot reads are newest first. */
  created_at: number;
}

/** A directive to write; the fields of the SPEC §4.2 envelope. */
export interface DirectiveRow {
  org_id: string;
  agent_id: string;
  /** `null` is stored and read back as "" (SPEC §4.2). */
  content: string | null;
  injection_mode: string;
  version_id: string;
}

/** A hit in the memory-wire item shape (SPEC §4.1), before validation. */
export interface StoreHit {
  memory: {
    id: string;
    org_id: string;
    agent_id: string;
    content: string;
    category: string;
    confidence: number;
    /** ISO-8601 UTC. */
    created_at: string;
  };
  similarity: number;
  /** 1-based position in this answer. */
  rank: number;
  source: 'hot' | 'fts';
}

/** A stored directive as the SPEC §4.2 envelope object, for `parseDirectiveObject`. */
export interface DirectiveEnvelope {
  v: 1;
  content: string | null;
  injection_mode: string;
  version_id: string;
}

/** Read options. `orgId: null` reads every org's rows for the agent (memory-server only). */
export interface ReadOptions {
  limit?: number;
  /** Minimum confidence, in [0,1]; default 0. */
  minConfidence?: number;
}

/** Open options. */
export interface OpenOptions {
  /** How long a write waits for another writer's lock, ms (better-sqlite3 `timeout`). Default 2000. */
  busyTimeoutMs?: number;
}

interface MemoryDbRow {
  id: string;
  org_id: string;
  agent_id: string;
  content: string;
  category: string;
  confidence: number;
  created_at: number;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS memories (
  pk INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  org_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  content TEXT NOT NULL,
  category TEXT NOT NULL,
  confidence REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
  created_at INTEGER NOT NULL,
  scope TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_scope_recency
  ON memories (org_id, agent_id, created_at DESC, confidence DESC, id);
CREATE INDEX IF NOT EXISTS memories_agent_recency
  ON memories (agent_id, created_at DESC, confidence DESC, id);
-- External-content FTS keyed on the explicit INTEGER PRIMARY KEY: an implicit rowid could be renumbered
-- by VACUUM and silently desynchronise the index. The \`scope\` column holds one token per agent
-- (\`a\` + the agent's 32 hex digits) so a search intersects with the agent's rows inside FTS5 instead
-- of scoring every agent's matches and filtering afterwards (about 4x faster at LoCoMo size).
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
  content, scope, content='memories', content_rowid='pk', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
  INSERT INTO memories_fts (rowid, content, scope) VALUES (new.pk, new.content, new.scope);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
  INSERT INTO memories_fts (memories_fts, rowid, content, scope) VALUES ('delete', old.pk, old.content, old.scope);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE ON memories BEGIN
  INSERT INTO memories_fts (memories_fts, rowid, content, scope) VALUES ('delete', old.pk, old.content, old.scope);
  INSERT INTO memories_fts (rowid, content, scope) VALUES (new.pk, new.content, new.scope);
END;
CREATE TABLE IF NOT EXISTS directives (
  org_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  content TEXT,
  injection_mode TEXT NOT NULL,
  version_id TEXT NOT NULL,
  PRIMARY KEY (org_id, agent_id)
) WITHOUT ROWID;
`;

const MEMORY_COLUMNS = 'm.id, m.org_id, m.agent_id, m.content, m.category, m.confidence, m.created_at';

function uuidArg(field: string, value: string): string {
  const id = canonicalUuid(value);
  if (id === null) throw Errors.invalidArgument(field, `${field} must be a UUID`);
  return id;
}

function limitArg(limit: number | undefined, fallback: number): number {
  if (limit === undefined) return fallback;
  if (!Number.isSafeInteger(limit) || limit < 1)
    throw Errors.invalidArgument('limit', 'limit must be an integer ≥ 1');
  return limit;
}

function minConfidenceArg(value: number | undefined): number {
  if (value === undefined) return 0;
  if (!Number.isFinite(value) || value < 0 || value > 1) {
    throw Errors.invalidArgument('min_confidence', 'min_confidence must be in [0,1]');
  }
  return value;
}

/** FTS5 token naming one agent (letters and digits only, so unicode61 keeps it whole). */
function scopeToken(agentId: string): string {
  return `a${agentId.replaceAll('-', '')}`;
}

/** Maps FTS5 bm25 (≤ 0, lower is better) into [0,1): s = x/(1+x), x = −bm25. */
export function bm25ToSimilarity(bm25: number): number {
  const x = -bm25;
  if (!Number.isFinite(x) || x <= 0) return 0;
  return x / (1 + x);
}

function toHit(row: MemoryDbRow, similarity: number, rank: number, source: StoreHit['source']): StoreHit {
  return {
    memory: {
      id: row.id,
      org_id: row.org_id,
      agent_id: row.agent_id,
      content: row.content,
      category: row.category,
      confidence: row.confidence,
      created_at: new Date(row.created_at).toISOString(),
    },
    similarity,
    rank,
    source,
  };
}

/** SQLite-backed memory and directive store (SPEC §4.3). Not safe to use after {@link close}. */
export class EmbeddedStore {
  /** The database file path (`:memory:` for an in-memory store). */
  readonly path: string;
  readonly #db: Database.Database;
  readonly #hotScoped: Database.Statement<[string, string, number, number], MemoryDbRow>;
  readonly #hotAgent: Database.Statement<[string, number, number], MemoryDbRow>;
  readonly #searchScoped: Database.Statement<
    [string, string, string, number, number],
    MemoryDbRow & { score: number }
  >;
  readonly #searchAgent: Database.Statement<
    [string, string, number, number],
    MemoryDbRow & { score: number }
  >;
  readonly #upsert: Database.Statement<MemoryDbRow & { scope: string }>;
  readonly #deleteScope: Database.Statement<[string, string]>;
  readonly #getDirective: Database.Statement<
    [string, string],
    { content: string | null; injection_mode: string; version_id: string }
  >;
  readonly #setDirective: Database.Statement<DirectiveRow>;
  readonly #deleteDirective: Database.Statement<[string, string]>;

  private constructor(file: string, db: Database.Database) {
    this.path = file;
    this.#db = db;
    this.#hotScoped = db.prepare(
      `SELECT ${MEMORY_COLUMNS} FROM memories m WHERE m.org_id = ? AND m.agent_id = ? AND m.confidence >= ?
       ORDER BY m.created_at DESC, m.confidence DESC, m.id LIMIT ?`,
    );
    this.#hotAgent = db.prepare(
      `SELECT ${MEMORY_COLUMNS} FROM memories m WHERE m.agent_id = ? AND m.confidence >= ?
       ORDER BY m.created_at DESC, m.confidence DESC, m.id LIMIT ?`,
    );
    this.#searchScoped = db.prepare(
      `SELECT ${MEMORY_COLUMNS}, bm25(memories_fts, 1.0, 0.0) AS score
       FROM memories_fts JOIN memories m ON m.pk = memories_fts.rowid
       WHERE memories_fts MATCH ? AND m.org_id = ? AND m.agent_id = ? AND m.confidence >= ?
       ORDER BY score, m.id LIMIT ?`,
    );
    this.#searchAgent = db.prepare(
      `SELECT ${MEMORY_COLUMNS}, bm25(memories_fts, 1.0, 0.0) AS score
       FROM memories_fts JOIN memories m ON m.pk = memories_fts.rowid
       WHERE memories_fts MATCH ? AND m.agent_id = ? AND m.confidence >= ?
       ORDER BY score, m.id LIMIT ?`,
    );
    this.#upsert = db.prepare(
      `INSERT INTO memories (id, org_id, agent_id, content, category, confidence, created_at, scope)
       VALUES (@id, @org_id, @agent_id, @content, @category, @confidence, @created_at, @scope)
       ON CONFLICT (id) DO UPDATE SET org_id = excluded.org_id, agent_id = excluded.agent_id,
         content = excluded.content, category = excluded.category, confidence = excluded.confidence,
         created_at = excluded.created_at, scope = excluded.scope`,
    );
    this.#deleteScope = db.prepare('DELETE FROM memories WHERE org_id = ? AND agent_id = ?');
    this.#getDirective = db.prepare(
      'SELECT content, injection_mode, version_id FROM directives WHERE org_id = ? AND agent_id = ?',
    );
    this.#setDirective = db.prepare(
      `INSERT INTO directives (org_id, agent_id, content, injection_mode, version_id)
       VALUES (@org_id, @agent_id, @content, @injection_mode, @version_id)
       ON CONFLICT (org_id, agent_id) DO UPDATE SET content = excluded.content,
         injection_mode = excluded.injection_mode, version_id = excluded.version_id`,
    );
    this.#deleteDirective = db.prepare('DELETE FROM directives WHERE org_id = ? AND agent_id = ?');
  }

  /**
   * Opens (creating if needed) the store at `file`; the parent directory is created on first start.
   * @param file path of the SQLite file, or `:memory:`.
   * @throws SqliteError when the file cannot be opened or is not a database.
   */
  static open(file: string, options: OpenOptions = {}): EmbeddedStore {
    if (file !== ':memory:') fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    const db = new Database(file, { timeout: options.busyTimeoutMs ?? 2000 });
    try {
      db.pragma('journal_mode = WAL');
      // NORMAL is durable across application crashes in WAL mode; only an OS crash can lose the tail.
      db.pragma('synchronous = NORMAL');
      db.exec(SCHEMA);
      return new EmbeddedStore(file, db);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  /**
   * The agent's most recent memories, then highest confidence, then id (SPEC §4.3).
   * @param orgId the org to scope to; `null` = every org (only for the memory wire, which has no org).
   * @returns wire-shaped hits, `rank` 1..n, `similarity = confidence`, `source = "hot"`.
   */
  hot(orgId: string | null, agentId: string, options: ReadOptions = {}): StoreHit[] {
    const agent = uuidArg('agent_id', agentId);
    const limit = limitArg(options.limit, HOT_LIMIT);
    const minConfidence = minConfidenceArg(options.minConfidence);
    const rows =
      orgId === null
        ? this.#hotAgent.all(agent, minConfidence, limit)
        : this.#hotScoped.all(uuidArg('org_id', orgId), agent, minConfidence, limit);
    return rows.map((row, i) => toHit(row, row.confidence, i + 1, 'hot'));
  }

  /**
   * FTS5 search over the agent's memories, best BM25 first (SPEC §4.3). Any text is accepted: it is
   * reduced to quoted terms by `toFtsQuery`, so it never raises an FTS5 syntax error.
   * @param orgId the org to scope to; `null` = every org (memory wire only).
   * @returns wire-shaped hits, `rank` 1..n, `similarity = x/(1+x)` with x = −bm25, `source = "fts"`;
   *   `[]` when the query has no searchable term.
   */
  search(orgId: string | null, agentId: string, query: string, options: ReadOptions = {}): StoreHit[] {
    const agent = uuidArg('agent_id', agentId);
    const limit = limitArg(options.limit, SEARCH_LIMIT);
    const minConfidence = minConfidenceArg(options.minConfidence);
    const terms = toFtsQuery(query);
    if (terms === null) return [];
    const match = `scope:"${scopeToken(agent)}" AND content:(${terms})`;
    const rows =
      orgId === null
        ? this.#searchAgent.all(match, agent, minConfidence, limit)
        : this.#searchScoped.all(match, uuidArg('org_id', orgId), agent, minConfidence, limit);
    return rows.map((row, i) => toHit(row, bm25ToSimilarity(row.score), i + 1, 'fts'));
  }

  /**
   * Inserts or replaces memories (by id) in one transaction.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a non-UUID id, a confidence outside [0,1] or a
   *   non-finite created_at; nothing is written then.
   */
  upsertMemories(rows: readonly MemoryRow[]): number {
    const clean = rows.map(checkMemory);
    this.#db.transaction(() => {
      for (const row of clean) this.#upsert.run({ ...row, scope: scopeToken(row.agent_id) });
    })();
    return clean.length;
  }

  /**
   * Replaces everything the store holds for one org+agent (memories, and the directive when given) in
   * one transaction, so re-running an import is idempotent and readers never see a half-written agent.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` as {@link upsertMemories}, or when a row is of another
   *   org/agent.
   */
  replaceAgent(orgId: string, agentId: string, rows: readonly MemoryRow[], directive?: DirectiveRow): number {
    const org = uuidArg('org_id', orgId);
    const agent = uuidArg('agent_id', agentId);
    const clean = rows.map(checkMemory);
    for (const row of clean) {
      if (row.org_id !== org || row.agent_id !== agent) {
        throw Errors.invalidArgument('agent_id', `memory ${row.id} is not of org ${org} agent ${agent}`);
      }
    }
    const dir = directive === undefined ? undefined : checkDirective(directive);
    this.#db.transaction(() => {
      this.#deleteScope.run(org, agent);
      for (const row of clean) this.#upsert.run({ ...row, scope: scopeToken(agent) });
      if (dir !== undefined) this.#setDirective.run(dir);
    })();
    return clean.length;
  }

  /** Deletes one org+agent's memories; returns how many. */
  deleteMemories(orgId: string, agentId: string): number {
    return this.#deleteScope.run(uuidArg('org_id', orgId), uuidArg('agent_id', agentId)).changes;
  }

  /**
   * Stores (or replaces) the directive of one org+agent. Values are stored as given: the SPEC §4.2 rules
   * are applied on read, exactly as for a Redis value.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` when org_id or agent_id is not a UUID.
   */
  setDirective(directive: DirectiveRow): void {
    this.#setDirective.run(checkDirective(directive));
  }

  /** Removes a directive; returns whether one existed. */
  deleteDirective(orgId: string, agentId: string): boolean {
    return this.#deleteDirective.run(uuidArg('org_id', orgId), uuidArg('agent_id', agentId)).changes > 0;
  }

  /** The stored directive as a SPEC §4.2 envelope, or `null` when none is stored. */
  getDirective(orgId: string, agentId: string): DirectiveEnvelope | null {
    const row = this.#getDirective.get(uuidArg('org_id', orgId), uuidArg('agent_id', agentId));
    if (row === undefined) return null;
    return { v: 1, content: row.content, injection_mode: row.injection_mode, version_id: row.version_id };
  }

  /** Row counts, for ingest summaries and tests. */
  counts(): { memories: number; directives: number; agents: number } {
    const m = this.#db
      .prepare('SELECT COUNT(*) AS n, COUNT(DISTINCT org_id || agent_id) AS a FROM memories')
      .get() as { n: number; a: number };
    const d = this.#db.prepare('SELECT COUNT(*) AS n FROM directives').get() as { n: number };
    return { memories: m.n, directives: d.n, agents: m.a };
  }

  /** Closes the database; idempotent. */
  close(): void {
    if (this.#db.open) this.#db.close();
  }
}

function checkMemory(row: MemoryRow): MemoryDbRow {
  if (typeof row.content !== 'string' || typeof row.category !== 'string') {
    throw Errors.invalidArgument('content', 'content and category must be strings');
  }
  if (!Number.isFinite(row.confidence) || row.confidence < 0 || row.confidence > 1) {
    throw Errors.invalidArgument('confidence', 'confidence must be in [0,1]');
  }
  // ±8.64e15 ms is the Date range; beyond it the ISO rendering of a hit would throw.
  if (!Number.isFinite(row.created_at) || Math.abs(row.created_at) > 8.64e15) {
    throw Errors.invalidArgument('created_at', 'created_at must be epoch ms');
  }
  return {
    id: uuidArg('id', row.id),
    org_id: uuidArg('org_id', row.org_id),
    agent_id: uuidArg('agent_id', row.agent_id),
    content: row.content,
    category: row.category,
    confidence: row.confidence,
    created_at: Math.trunc(row.created_at),
  };
}

function checkDirective(d: DirectiveRow): DirectiveRow {
  return {
    org_id: uuidArg('org_id', d.org_id),
    agent_id: uuidArg('agent_id', d.agent_id),
    content: d.content,
    injection_mode: d.injection_mode,
    version_id: d.version_id,
  };
}
