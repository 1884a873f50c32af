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
