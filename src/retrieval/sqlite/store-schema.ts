/**
 * Embedded-store schema, versioned by `PRAGMA user_version` (3: `porter` stemming, docs/scoring.md; 4:
 * usefulness and inclusions). The triggers call `ibex_fts_text`, so every connection registers it first.
 */
import type Database from 'better-sqlite3';
import { toFtsText } from '../../text/fts-query.js';

export const SCHEMA_VERSION = 4;

/** Length in code points (a lone surrogate counts 1, as SQLite stores U+FFFD). No allocation. */
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
 * FTS5 scope token `a<agent hex>0<org hex>` (66 bytes, past the 64 the stemmer touches). One token, not
 * two: bm25 takes a row's length over all columns, so a second token would shift every score.
 */
export function scopeText(orgId: string, agentId: string): string {
  return `${agentScopePrefix(agentId)}${orgId.replaceAll('-', '')}`;
}

/** `a<agent hex>0`: ends in a digit so `porter` (which stems prefix queries too) leaves it alone. */
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

// Contentless: the indexed text is derived (bigrams), so a delete needs only the rowid. Keyed on the
// explicit INTEGER PRIMARY KEY: VACUUM could renumber an implicit rowid.
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

/** One IMMEDIATE transaction re-checking the version, so concurrent openers migrate once. */
function migrate(db: Database.Database): void {
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version >= SCHEMA_VERSION) return;
    if (version < 3) reindex(db);
    addFeedbackColumns(db);
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}

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

/** Version 4; the FTS triggers ignore these columns. */
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

/** Registers the SQL functions, then migrates; @throws Error for a newer schema than this build knows. */
export function prepareConnection(db: Database.Database): void {
  registerFunctions(db);
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version > SCHEMA_VERSION) {
    throw new Error(`embedded store schema version ${version} is newer than this build (${SCHEMA_VERSION})`);
  }
  if (version < SCHEMA_VERSION) migrate(db);
}
