/**
 * `ingest --locomo … --postgres <url>` (issue 15): the same LoCoMo import as the embedded store's —
 * same ids, memories and directives (cli/commands/ingest.ts) — written to the PostgreSQL store, each
 * agent replaced in one transaction so a re-run is idempotent and replicas never read half an agent.
 */
import {
  type IngestSummary,
  type LocomoConversation,
  locomoDirective,
  locomoMemories,
  readLocomo,
} from '../../cli/commands/ingest.js';
import { canonicalUuid } from '../uuid.js';
import { PgStore } from './pg-store.js';

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

/**
 * CLI body of `ingest --locomo <dir> --postgres <url>`: reads, migrates, imports, prints the summary as
 * one JSON line.
 * @returns 0 on success, 1 when reading or writing fails (JSON `{"error"}` on stderr; the URL, which may
 *   hold a password, is never echoed: pg's messages name the server only).
 */
export async function runPostgresIngest(
  locomo: string,
  pg: { url: string; schema: string },
  org: string,
): Promise<number> {
  let store: PgStore | undefined;
  try {
    const conversations = await readLocomo(locomo);
    store = await PgStore.open({ url: pg.url, schema: pg.schema, poolMax: 2 });
    const summary = await ingestLocomoPostgres(store, conversations, org);
    process.stdout.write(`${JSON.stringify(summary)}\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`${JSON.stringify({ error: `ingest: ${(err as Error).message}` })}\n`);
    return 1;
  } finally {
    await store?.close();
  }
}
