/**
 * Schema of the PostgreSQL store: numbered migrations applied at start-up, in one transaction
 * under a transaction-scoped advisory lock, so replicas starting together apply each migration exactly
 * once (the second waits for the first, then finds nothing left to do).
 *
 * Migrations are TS strings rather than .sql files so they ship inside `dist/` with no loader. Never edit
 * an applied migration: add the next number.
 */
import type pg from 'pg';

/** One numbered migration. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Every migration, in order. Applied ones are recorded in `<schema>.schema_migrations`. */
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
    // Defaults, so existing rows read as neutral and never included; PostgreSQL adds such columns
    // without rewriting the table.
    sql: `
ALTER TABLE memories
  ADD COLUMN usefulness double precision NOT NULL DEFAULT 0.5 CHECK (usefulness >= 0 AND usefulness <= 1),
  ADD COLUMN inclusions integer NOT NULL DEFAULT 0 CHECK (inclusions >= 0);
`,
  },
];

/** Valid schema names: a plain lower-case identifier, so it can be interpolated without quoting rules. */
export const SCHEMA_NAME_RE = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Advisory-lock key of a schema's migrations: a stable 64-bit number from its name, so two schemas in
 * one database migrate independently.
 */
function lockKey(schema: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(`ibex-context:${schema}`, 'utf8')) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return BigInt.asIntN(64, h);
}

/** What {@link migrate} did. */
export interface MigrateResult {
  /** Versions this call applied (empty when another replica had already applied them). */
  applied: number[];
  /** Highest version now in the schema. */
  version: number;
}

/**
 * Creates `schema` if needed and applies the migrations it lacks, all in one transaction holding
 * `pg_advisory_xact_lock(key(schema))`: concurrent callers serialise, and a failed migration leaves
 * nothing half-applied.
 * @param client a connected client, not inside a transaction.
 * @throws Error for an invalid schema name; the database's error when a migration fails (rolled back).
 */
export async function migrate(
  client: pg.ClientBase,
  schema: string,
  migrations: readonly Migration[] = MIGRATIONS,
): Promise<MigrateResult> {
  if (!SCHEMA_NAME_RE.test(schema)) throw new Error(`invalid PostgreSQL schema name: ${schema}`);
  await client.query('BEGIN');
  try {
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
