/**
 * Writes of the PostgreSQL store: memory rows checked by the embedded store's checkMemory,
 * batched multi-row upserts with the search column computed from search-text.ts, directive upserts.
 * Run inside the store's transactions (pg-store.ts).
 */
import type pg from 'pg';
import type { DirectiveRow, MemoryRow } from '../store-rows.js';
import { uuidArg } from '../store-rows.js';
import { indexText } from './search-text.js';

/** Rows per INSERT: 8 parameters each, far below PostgreSQL's 65535-parameter limit. */
const INSERT_BATCH = 500;

/** Inserts or replaces `rows` (already checked) by id. */
export async function insertMemories(client: pg.PoolClient, rows: readonly MemoryRow[]): Promise<void> {
  for (let start = 0; start < rows.length; start += INSERT_BATCH) {
    const batch = rows.slice(start, start + INSERT_BATCH);
    const values: unknown[] = [];
    const tuples = batch.map((r, i) => {
      values.push(r.id, r.org_id, r.agent_id, r.content, r.category, r.confidence, r.created_at);
      values.push(indexText(r.content));
      const p = (k: number) => `$${i * 8 + k}`;
      return `(${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)}, ${p(6)},
        to_timestamp(${p(7)}::double precision / 1000), to_tsvector('simple', ${p(8)}))`;
    });
    await client.query(
      `INSERT INTO memories (id, org_id, agent_id, content, category, confidence, created_at, search)
       VALUES ${tuples.join(',')}
       ON CONFLICT (id) DO UPDATE SET org_id = excluded.org_id, agent_id = excluded.agent_id,
         content = excluded.content, category = excluded.category, confidence = excluded.confidence,
         created_at = excluded.created_at, search = excluded.search`,
      values,
    );
  }
}

/** Inserts or replaces one directive; ids must be UUIDs (INVALID_ARGUMENT otherwise). */
export async function upsertDirective(client: pg.PoolClient, d: DirectiveRow): Promise<void> {
  await client.query(
    `INSERT INTO directives (org_id, agent_id, content, injection_mode, version_id) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (org_id, agent_id) DO UPDATE SET content = excluded.content,
       injection_mode = excluded.injection_mode, version_id = excluded.version_id`,
    [uuidArg('org_id', d.org_id), uuidArg('agent_id', d.agent_id), d.content, d.injection_mode, d.version_id],
  );
}
