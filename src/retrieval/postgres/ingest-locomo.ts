/**
 * `ingest --locomo … --postgres <url>` (issue 15): the same LoCoMo import as the embedded store's —
 * same ids, memories and directives (src/locomo/ingest.ts) — written to the PostgreSQL store, each
 * agent replaced in one transaction so a re-run is idempotent and replicas never read half an agent.
 */
import type { LocomoConversation } from '../../locomo/dataset.js';
import { type IngestSummary, locomoDirective, locomoMemories } from '../../locomo/ingest.js';
import { canonicalUuid } from '../uuid.js';
import type { PgStore } from './pg-store.js';

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
  const org = canonicalUuid(orgId);
  if (org === null) throw new Error('org must be a UUID');
  const summary: IngestSummary = {
    db: `postgres:${store.schema}`,
    org_id: org,
    agents: [],
    memories: 0,
    directives: 0,
  };
  for (const conv of conversations) {
    const rows = locomoMemories(conv, org);
    await store.replaceAgent(org, conv.agentId, rows, locomoDirective(conv, org));
    summary.agents.push({
      agent_id: conv.agentId,
      sample_id: conv.sampleId,
      file: conv.file,
      speakers: [conv.speakerA, conv.speakerB],
      memories: rows.length,
    });
    summary.memories += rows.length;
    summary.directives++;
  }
  return summary;
}
