/**
 * `ingest --locomo … --postgres <url>`: the same LoCoMo import as the embedded store's —
 * same ids, memories and directives (src/tools/locomo/ingest.ts) — written to the PostgreSQL store, each
 * agent replaced in one transaction so a re-run is idempotent and replicas never read half an agent.
 */

import type { PgStore } from '../../retrieval/postgres/pg-store.js';
import type { LocomoConversation } from './dataset.js';
import { type IngestSummary, planLocomoImport } from './ingest.js';

/**
 * Replaces each conversation's agent (memories + directive) in `store`.
 * @returns the summary; its `db` is `postgres:<schema>` (the URL may hold a password, so it is not shown).
 * @throws Error when `orgId` is not a UUID; the database error when a write fails (that agent rolled back).
 */
export async function ingestLocomoPostgres(
  store: PgStore,
  conversations: readonly LocomoConversation[],
  orgId: string,
): Promise<IngestSummary> {
  const { org, agents, summary } = planLocomoImport(conversations, orgId, `postgres:${store.schema}`);
  for (const a of agents) await store.replaceAgent(org, a.agentId, a.memories, a.directive);
  // The cold search's plan needs the statistics of the tables just filled; autovacuum would get there late.
  await store.analyze();
  return summary;
}
