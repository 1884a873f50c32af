/** Writes of the PostgreSQL store, run inside its transactions (pg-store.ts). */
import type pg from 'pg';
import { type FeedbackKind, type InclusionCount, usefulnessDelta } from '../feedback.js';
import type { DirectiveRow, MemoryRow } from '../store-rows.js';
import { uuidArg } from '../store-rows.js';
import { indexText, SEARCH_CONFIG } from './search-text.js';

/** 8 parameters each, far below PostgreSQL's 65535-parameter limit. */
const INSERT_BATCH = 500;

export async function insertMemories(client: pg.PoolClient, rows: readonly MemoryRow[]): Promise<void> {
  for (let start = 0; start < rows.length; start += INSERT_BATCH) {
    const batch = rows.slice(start, start + INSERT_BATCH);
    const values: unknown[] = [];
    const tuples = batch.map((r, i) => {
      values.push(r.id, r.org_id, r.agent_id, r.content, r.category, r.confidence, r.created_at);
      values.push(indexText(r.content));
      const p = (k: number) => `$${i * 8 + k}`;
      return `(${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)}, ${p(6)},
        to_timestamp(${p(7)}::double precision / 1000), to_tsvector('${SEARCH_CONFIG}', ${p(8)}))`;
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

export async function upsertDirective(client: pg.PoolClient, d: DirectiveRow): Promise<void> {
  await client.query(
    `INSERT INTO directives (org_id, agent_id, content, injection_mode, version_id) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (org_id, agent_id) DO UPDATE SET content = excluded.content,
       injection_mode = excluded.injection_mode, version_id = excluded.version_id`,
    [uuidArg('org_id', d.org_id), uuidArg('agent_id', d.agent_id), d.content, d.injection_mode, d.version_id],
  );
}

/** Replaces one org+agent's memories (already checked), and its directive when given. */
export async function replaceAgentRows(
  client: pg.PoolClient,
  org: string,
  agent: string,
  rows: readonly MemoryRow[],
  directive: DirectiveRow | undefined,
): Promise<void> {
  await client.query('DELETE FROM memories WHERE org_id = $1 AND agent_id = $2', [org, agent]);
  await insertMemories(client, rows);
  if (directive !== undefined) await upsertDirective(client, directive);
}

/** One feedback step on the org's memories; rows locked in id order, so concurrent calls never deadlock. */
export async function applyFeedback(
  client: pg.PoolClient,
  org: string,
  memoryIds: readonly string[],
  kind: FeedbackKind,
): Promise<{ id: string; previous: number; current: number }[]> {
  const r = await client.query<{ id: string; previous: number; current: number }>(
    `WITH prev AS (
       SELECT id, usefulness FROM memories WHERE org_id = $1 AND id = ANY($2::uuid[])
       ORDER BY id FOR UPDATE)
     UPDATE memories m SET usefulness = LEAST(1, GREATEST(0, prev.usefulness + $3))
     FROM prev WHERE m.id = prev.id
     RETURNING m.id, prev.usefulness AS previous, m.usefulness AS current`,
    [org, memoryIds, usefulnessDelta(kind)],
  );
  return r.rows;
}

export async function addInclusionCounts(
  client: pg.PoolClient,
  rows: readonly InclusionCount[],
): Promise<number> {
  const r = await client.query(
    `UPDATE memories m SET inclusions = LEAST(2147483647, m.inclusions::bigint + c.n)
     FROM unnest($1::uuid[], $2::uuid[], $3::integer[]) AS c(id, org, n)
     WHERE m.id = c.id AND m.org_id = c.org`,
    [rows.map((r) => r.memoryId), rows.map((r) => r.orgId), rows.map((r) => r.count)],
  );
  return r.rowCount ?? 0;
}
