/**
 * Schema of the embedded store (contract.md §4.3) and its migrations, versioned by `PRAGMA user_version`.
 *
 * - version 0 (files written before schema versions, or a new file): external-content FTS5 over the raw
 *   content, scope = one token per agent, no stored length.
 * - version 2: `memories.chars` = the content's length in code points, stored at write time so the read
 *   caps (contract.md §4.1 `oversize`) are a predicate on an integer and no text is measured on a read;
 *   a contentless FTS5 table over {@link toFtsText} (CJK bigrams) filled by triggers through
 *   the SQL function `ibex_fts_text`; scope = one agent+org token, so a scoped search is decided inside FTS5 and only the top `limit` rows are joined.
 * - version 3: the FTS5 table stems English words (`porter` over `unicode61`): a question's `painting`
 *   finds a memory's `painted`, which raised LoCoMo evidence recall by 3–6 points at every bounded
 *   budget (docs/quality.md). The PostgreSQL store still searches with the `simple` configuration. The scope token puts a digit after the agent part (`a<agent hex>0<org hex>`): the
 *   stemmer leaves tokens over 64 bytes alone, but the memory wire's agent prefix is shorter, and one
 *   ending in letters such as `ed` would be stemmed into a prefix of other agents' tokens; no English
 *   suffix ends in a digit. The migration re-indexes every row.
 * - version 4: `memories.usefulness` (the feedback score in [0, 1], neutral 0.5) and `memories.inclusions`
 *   (how many answers included the memory), read by the composite's usefulness and frequency terms and
 *   written by RecordMemoryFeedback and the inclusion counter (contract.md §7, §7a).
 *
 * Every connection registers the SQL functions before touching the schema ({@link prepareConnection}):
 * the triggers call `ibex_fts_text`, so a write through a connection without it fails rather than
 * indexing wrong text.
 */
import type Database from 'better-sqlite3';
import { toFtsText } from '../../text/fts-query.js';

/** Current `PRAGMA user_version`. */
export const SCHEMA_VERSION = 4;

/** Length in code points (a lone surrogate counts 1, as SQLite stores it as one U+FFFD). No allocation. */
export function codePoints(text: string): number {
  let n = text.length;
  for (let i = 0; i < text.length - 1; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}

/**
 * FTS5 scope token of a row: `a<agent hex>0<org hex>`, one token (66 bytes: longer than the 64 the
 * stemmer touches). A scoped search matches it whole; the memory wire's agent-across-orgs read matches the
 * prefix {@link agentScopePrefix}. One token, not two, because FTS5's bm25 takes a row's length over all
 * columns: a second scope token would shift every score.
 */
export function scopeText(orgId: string, agentId: string): string {
  return `${agentScopePrefix(agentId)}${orgId.replaceAll('-', '')}`;
}

/**
 * The agent's part of {@link scopeText}, `a<agent hex>0`: it ends in a digit so that the `porter`
 * stemmer, which also stems the terms of a prefix query, leaves it as it is.
 */
export function agentScopePrefix(agentId: string): string {
  return `a${agentId.replaceAll('-', '')}0`;
}

const MEMORIES = `
CREATE TABLE IF NOT EXISTS memories (
  pk INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  org_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  content TEXT NOT NULL,
  category TEXT NOT NULL,
  confidence REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
  created_at INTEGER NOT NULL,
  scope TEXT NOT NULL,
  chars INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS memories_scope_recency
  ON memories (org_id, agent_id, created_at DESC, confidence DESC, id);
CREATE INDEX IF NOT EXISTS memories_agent_recency
  ON memories (agent_id, created_at DESC, confidence DESC, id);
CREATE TABLE IF NOT EXISTS directives (
  org_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  content TEXT,
  injection_mode TEXT NOT NULL,
  version_id TEXT NOT NULL,
  PRIMARY KEY (org_id, agent_id)
) WITHOUT ROWID;
`;

// `porter` stems the English words unicode61 splits (bigrams and scope tokens pass unchanged).
// Contentless (content='') with contentless_delete: the indexed text is derived (bigrams), so it cannot
// be read back from \`memories\` the way an external-content table would, and a delete needs only the rowid.
// Keyed on the explicit INTEGER PRIMARY KEY: an implicit rowid could be renumbered by VACUUM.
const FTS_TABLE = `
CREATE VIRTUAL TABLE memories_fts USING fts5(
  content, scope, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
  INSERT INTO memories_fts (rowid, content, scope) VALUES (new.pk, ibex_fts_text(new.content), new.scope);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
  DELETE FROM memories_fts WHERE rowid = old.pk;
END;
CREATE TRIGGER memories_au AFTER UPDATE OF content, scope ON memories BEGIN
  DELETE FROM memories_fts WHERE rowid = old.pk;
  INSERT INTO memories_fts (rowid, content, scope) VALUES (new.pk, ibex_fts_text(new.content), new.scope);
END;
`;

/** Registers the SQL functions the triggers and migrations call. */
function registerFunctions(db: Database.Database): void {
  db.function('ibex_fts_text', { deterministic: true }, (content: unknown) =>
    typeof content === 'string' ? toFtsText(content) : '',
  );
  db.function('ibex_chars', { deterministic: true }, (content: unknown) =>
    typeof content === 'string' ? codePoints(content) : 0,
  );
  db.function('ibex_scope', { deterministic: true }, (org: unknown, agent: unknown) =>
    scopeText(String(org), String(agent)),
  );
}

function hasColumn(db: Database.Database, table: string, column: string): boolean {
  return (db.pragma(`table_info(${table})`) as { name: string }[]).some((c) => c.name === column);
}

/**
 * Brings an older file (version 0, 2 or 3) or a new one to {@link SCHEMA_VERSION}. Below version 3: adds
 * and fills `chars`, rewrites the scope tokens, replaces the FTS table and triggers, re-indexes every row
 * and merges the index into one segment; then the feedback columns. Runs in one IMMEDIATE transaction,
 * re-checking the version inside, so concurrent openers (the service and its store-read threads) migrate once.
 */
function migrate(db: Database.Database): void {
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version >= SCHEMA_VERSION) return;
    if (version < 3) reindex(db);
    addFeedbackColumns(db);
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}

/** Versions 0 and 2 → 3 (see the module comment); runs inside {@link migrate}'s transaction. */
function reindex(db: Database.Database): void {
  db.exec(MEMORIES);
  if (!hasColumn(db, 'memories', 'chars')) {
    db.exec('ALTER TABLE memories ADD COLUMN chars INTEGER NOT NULL DEFAULT 0');
  }
  db.exec(`
    DROP TRIGGER IF EXISTS memories_ai;
    DROP TRIGGER IF EXISTS memories_ad;
    DROP TRIGGER IF EXISTS memories_au;
    DROP TABLE IF EXISTS memories_fts;
    UPDATE memories SET chars = ibex_chars(content), scope = ibex_scope(org_id, agent_id);
  `);
  db.exec(FTS_TABLE);
  db.exec(`
    INSERT INTO memories_fts (rowid, content, scope) SELECT pk, ibex_fts_text(content), scope FROM memories;
    INSERT INTO memories_fts (memories_fts) VALUES ('optimize');
  `);
}

/**
 * Version 4: the feedback score and the inclusion count. Added with defaults, so existing rows read as
 * neutral and never included; the FTS triggers fire only on content and scope, so updating these
 * columns never touches the index.
 */
function addFeedbackColumns(db: Database.Database): void {
  if (!hasColumn(db, 'memories', 'usefulness')) {
    db.exec(
      'ALTER TABLE memories ADD COLUMN usefulness REAL NOT NULL DEFAULT 0.5 CHECK (usefulness >= 0 AND usefulness <= 1)',
    );
  }
  if (!hasColumn(db, 'memories', 'inclusions')) {
    db.exec('ALTER TABLE memories ADD COLUMN inclusions INTEGER NOT NULL DEFAULT 0 CHECK (inclusions >= 0)');
  }
}

/**
 * Readies a freshly opened connection: SQL functions, then the schema at {@link SCHEMA_VERSION}.
 * @throws Error when the file's schema is newer than this build knows (`user_version` > {@link SCHEMA_VERSION}), so an old
 *   binary never writes rows a newer schema would index differently; SqliteError for a corrupt file.
 */
export function prepareConnection(db: Database.Database): void {
  registerFunctions(db);
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version > SCHEMA_VERSION) {
    throw new Error(`embedded store schema version ${version} is newer than this build (${SCHEMA_VERSION})`);
  }
  if (version < SCHEMA_VERSION) migrate(db);
}
