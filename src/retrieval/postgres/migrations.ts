/**
 * Numbered migrations applied at start-up in one transaction under an advisory lock, so replicas apply
 * each exactly once. TS strings so they ship in `dist/`; never edit an applied one, add the next number.
 */
import type pg from 'pg';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'memories and directives',
    sql: `
CREATE TABLE memories (
  id uuid PRIMARY KEY,
  org_id uuid NOT NULL,
  agent_id uuid NOT NULL,
  content text NOT NULL,
  -- Code points (char_length on a UTF-8 database), stored at write time so the memory size cap
  -- (IBEX_CONTEXT_MAX_MEMORY_CHARS) is a filter in SQL, not a count at read time.
  content_chars integer GENERATED ALWAYS AS (char_length(content)) STORED,
  category text NOT NULL,
  confidence double precision NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
  created_at timestamptz NOT NULL,
  -- Written by the store from search-text.ts indexText(content): words plus CJK bigrams.
  search tsvector NOT NULL
);
CREATE INDEX memories_scope_recency ON memories (org_id, agent_id, created_at DESC, confidence DESC, id);
CREATE INDEX memories_agent_recency ON memories (agent_id, created_at DESC, confidence DESC, id);
CREATE INDEX memories_search ON memories USING gin (search);
CREATE TABLE directives (
  org_id uuid NOT NULL,
  agent_id uuid NOT NULL,
  content text,
  injection_mode text NOT NULL,
  version_id text NOT NULL,
  PRIMARY KEY (org_id, agent_id)
);
`,
  },
  {
    version: 2,
    name: 'usefulness and inclusions',
    // Defaults: PostgreSQL adds such columns without rewriting the table.
    sql: `
ALTER TABLE memories
  ADD COLUMN usefulness double precision NOT NULL DEFAULT 0.5 CHECK (usefulness >= 0 AND usefulness <= 1),
  ADD COLUMN inclusions integer NOT NULL DEFAULT 0 CHECK (inclusions >= 0);
`,
  },
  {
    version: 3,
    name: 'room for in-page updates',
    // Inclusion counts and usefulness are updated often and are in no index: with room left on each page
    // their new row versions stay on it (heap-only tuples) instead of adding index entries and dead rows
    // that every search reads until a vacuum. A catalog change: pages written from now on keep the room.
    sql: `
ALTER TABLE memories SET (fillfactor = 85);
`,
  },
  {
    version: 4,
    name: 'stemmed search',
    // Stemmed search, as the embedded store's porter tokenizer: a question's "painting" finds a memory's
    // "painted". Snowball English with no stop word list (pg_catalog.english would drop words such as
    // "again" that a query keeps). Each row's words are read back from its 'simple' tsvector in position
    // order, which is its indexed text (search-text.ts indexText keeps only letter/digit runs and CJK
    // bigrams), so no row needs the application to re-index it.
    sql: `
CREATE TEXT SEARCH DICTIONARY stemmed_english (TEMPLATE = snowball, LANGUAGE = english);
CREATE TEXT SEARCH CONFIGURATION stemmed (COPY = pg_catalog.english);
ALTER TEXT SEARCH CONFIGURATION stemmed
  ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part WITH stemmed_english;
UPDATE memories SET search = to_tsvector('stemmed', coalesce((
  SELECT string_agg(u.lexeme, ' ' ORDER BY p.pos)
  FROM unnest(memories.search) AS u(lexeme, positions, weights), unnest(u.positions) AS p(pos)), ''));
ANALYZE memories;
`,
  },
  {
    version: 5,
    name: 'search statistics',
    // BM25 weighs a query's rare words above its common ones (ts_rank has no inverse document frequency).
    // Document frequencies per org+agent are kept by statement-level triggers at write time, so a search
    // reads one row per query lexeme instead of counting them; per agent, so one tenant's text never
    // weighs another's search. Keys lead with agent_id, as reads scope by agent and optionally by org (a
    // generic plan cannot use an org-first key). Writers lock in key order, so they never deadlock.
    sql: `
CREATE TABLE search_terms (
  org_id uuid NOT NULL,
  agent_id uuid NOT NULL,
  lexeme text NOT NULL,
  docs integer NOT NULL,
  PRIMARY KEY (agent_id, lexeme, org_id)
);
CREATE TABLE search_stats (
  org_id uuid NOT NULL,
  agent_id uuid NOT NULL,
  docs integer NOT NULL,
  -- Sum of each row's distinct lexemes (length(search)): the average document length.
  lexemes bigint NOT NULL,
  PRIMARY KEY (agent_id, org_id)
);
CREATE FUNCTION search_stats_count() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  sign integer := CASE TG_OP WHEN 'DELETE' THEN -1 ELSE 1 END;
BEGIN
  INSERT INTO search_terms AS t (org_id, agent_id, lexeme, docs)
    SELECT c.org_id, c.agent_id, u.lexeme, sign * count(*)
    FROM changed c, unnest(tsvector_to_array(c.search)) AS u(lexeme)
    GROUP BY 1, 2, 3 ORDER BY 2, 3, 1
  ON CONFLICT (agent_id, lexeme, org_id) DO UPDATE SET docs = t.docs + excluded.docs;
  INSERT INTO search_stats AS s (org_id, agent_id, docs, lexemes)
    SELECT c.org_id, c.agent_id, sign * count(*), sign * sum(length(c.search))
    FROM changed c GROUP BY 1, 2 ORDER BY 2, 1
  ON CONFLICT (agent_id, org_id) DO UPDATE
    SET docs = s.docs + excluded.docs, lexemes = s.lexemes + excluded.lexemes;
  IF sign < 0 THEN
    DELETE FROM search_terms t USING (SELECT DISTINCT org_id, agent_id FROM changed) a
      WHERE t.org_id = a.org_id AND t.agent_id = a.agent_id AND t.docs <= 0;
    DELETE FROM search_stats s USING (SELECT DISTINCT org_id, agent_id FROM changed) a
      WHERE s.org_id = a.org_id AND s.agent_id = a.agent_id AND s.docs <= 0;
  END IF;
  RETURN NULL;
END
$fn$;
-- An upsert that rewrites a row's text or moves it to another agent (rare): the old row out, the new in.
CREATE FUNCTION search_stats_move() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
BEGIN
  UPDATE search_terms SET docs = docs - 1
    WHERE org_id = OLD.org_id AND agent_id = OLD.agent_id AND lexeme = ANY (tsvector_to_array(OLD.search));
  DELETE FROM search_terms WHERE org_id = OLD.org_id AND agent_id = OLD.agent_id AND docs <= 0;
  UPDATE search_stats SET docs = docs - 1, lexemes = lexemes - length(OLD.search)
    WHERE org_id = OLD.org_id AND agent_id = OLD.agent_id;
  DELETE FROM search_stats WHERE org_id = OLD.org_id AND agent_id = OLD.agent_id AND docs <= 0;
  INSERT INTO search_terms AS t (org_id, agent_id, lexeme, docs)
    SELECT NEW.org_id, NEW.agent_id, u.lexeme, 1 FROM unnest(tsvector_to_array(NEW.search)) AS u(lexeme)
    ORDER BY 3
  ON CONFLICT (agent_id, lexeme, org_id) DO UPDATE SET docs = t.docs + 1;
  INSERT INTO search_stats AS s (org_id, agent_id, docs, lexemes)
    VALUES (NEW.org_id, NEW.agent_id, 1, length(NEW.search))
  ON CONFLICT (agent_id, org_id) DO UPDATE SET docs = s.docs + 1, lexemes = s.lexemes + excluded.lexemes;
  RETURN NULL;
END
$fn$;
CREATE TRIGGER memories_search_insert AFTER INSERT ON memories
  REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION search_stats_count();
CREATE TRIGGER memories_search_delete AFTER DELETE ON memories
  REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION search_stats_count();
CREATE TRIGGER memories_search_update AFTER UPDATE OF org_id, agent_id, search ON memories FOR EACH ROW
  WHEN (OLD.org_id IS DISTINCT FROM NEW.org_id OR OLD.agent_id IS DISTINCT FROM NEW.agent_id
        OR OLD.search IS DISTINCT FROM NEW.search)
  EXECUTE FUNCTION search_stats_move();
INSERT INTO search_terms (org_id, agent_id, lexeme, docs)
  SELECT m.org_id, m.agent_id, u.lexeme, count(*)
  FROM memories m, unnest(tsvector_to_array(m.search)) AS u(lexeme) GROUP BY 1, 2, 3;
INSERT INTO search_stats (org_id, agent_id, docs, lexemes)
  SELECT org_id, agent_id, count(*), sum(length(search)) FROM memories GROUP BY 1, 2;
ANALYZE search_terms;
ANALYZE search_stats;
`,
  },
];

/** A plain lower-case identifier, so it can be interpolated without quoting. */
export const SCHEMA_NAME_RE = /^[a-z_][a-z0-9_]{0,62}$/;

/** Stable 64-bit key per schema, so schemas in one database migrate independently. */
function lockKey(schema: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(`ibex-context:${schema}`, 'utf8')) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return BigInt.asIntN(64, h);
}

export interface MigrateResult {
  /** Empty when another replica had already applied them. */
  applied: number[];
  version: number;
}

/**
 * Creates `schema` and applies missing migrations in one transaction under `pg_advisory_xact_lock`.
 * @param client connected, not inside a transaction.
 * @throws Error for an invalid schema name; the database's error (rolled back).
 */
export async function migrate(
  client: pg.ClientBase,
  schema: string,
  migrations: readonly Migration[] = MIGRATIONS,
): Promise<MigrateResult> {
  if (!SCHEMA_NAME_RE.test(schema)) throw new Error(`invalid PostgreSQL schema name: ${schema}`);
  await client.query('BEGIN');
  try {
    // The connection's statement_timeout bounds reads (a few ms); a migration that rewrites rows, and a
    // replica waiting for the lock while another migrates, take longer.
    await client.query('SET LOCAL statement_timeout = 0');
    await client.query('SELECT pg_advisory_xact_lock($1)', [lockKey(schema).toString()]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${schema}.schema_migrations (
         version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const done = await client.query<{ version: number }>(`SELECT version FROM ${schema}.schema_migrations`);
    const have = new Set(done.rows.map((r) => r.version));
    await client.query(`SET LOCAL search_path TO ${schema}`);
    const applied: number[] = [];
    for (const m of migrations) {
      if (have.has(m.version)) continue;
      await client.query(m.sql);
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
        m.version,
        m.name,
      ]);
      applied.push(m.version);
    }
    await client.query('COMMIT');
    const version = Math.max(0, ...have, ...applied);
    return { applied, version };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
