/**
 * LoCoMo conversations as store rows (contract.md §4.3): one agent per conversation, every dialogue turn an
 * `episodic` memory `<speaker>: <text>`, every session summary a `factual` memory, one directive per
 * agent; each agent is replaced as a whole, so re-running an import gives the same store. The embedded
 * store's import is here; the PostgreSQL one (retrieval/postgres/ingest-locomo.ts) writes the same rows.
 */
import type { DirectiveRow, EmbeddedStore, MemoryRow } from '../../retrieval/sqlite/embedded-store.js';
import { canonicalUuid, uuidV5 } from '../../util/uuid.js';
import { LOCOMO_MEMORY_NS, type LocomoConversation, locomoConfidence } from './dataset.js';

/** Ingest result, printed by the CLI. */
export interface IngestSummary {
  db: string;
  org_id: string;
  agents: {
    agent_id: string;
    sample_id: string;
    file: string;
    speakers: [string, string];
    memories: number;
  }[];
  memories: number;
  directives: number;
}

/** The memories of one conversation: episodic turns and factual summaries. */
export function locomoMemories(conv: LocomoConversation, orgId: string): MemoryRow[] {
  const rows: MemoryRow[] = [];
  for (const session of conv.sessions) {
    for (const turn of session.turns) {
      rows.push({
        id: turn.memoryId,
        org_id: orgId,
        agent_id: conv.agentId,
        content: `${turn.speaker}: ${turn.text}`,
        category: 'episodic',
        confidence: locomoConfidence(turn.memoryId),
        created_at: turn.createdAt,
      });
    }
    if (session.summary !== null && session.summaryMemoryId !== null) {
      rows.push({
        id: session.summaryMemoryId,
        org_id: orgId,
        agent_id: conv.agentId,
        content: session.summary,
        category: 'factual',
        confidence: locomoConfidence(session.summaryMemoryId),
        // Just after the session's last turn: a summary is written once the session is over.
        created_at: session.startedAt + session.turns.length * 1000,
      });
    }
  }
  return rows;
}

/** The directive of one conversation's agent (mode `system_first`, deterministic version id). */
export function locomoDirective(conv: LocomoConversation, orgId: string): DirectiveRow {
  return {
    org_id: orgId,
    agent_id: conv.agentId,
    content:
      `You are the assistant of ${conv.speakerA} and ${conv.speakerB}. Your memories are their past ` +
      'conversations: answer from them, say so when they do not cover the question, and never invent details.',
    injection_mode: 'system_first',
    version_id: uuidV5(`${conv.agentId}:directive:v1`, LOCOMO_MEMORY_NS),
  };
}

/** One agent of an import: its rows as every store writes them. */
export interface LocomoAgentRows {
  agentId: string;
  memories: MemoryRow[];
  directive: DirectiveRow;
}

/**
 * What importing `conversations` under `orgId` writes, agent by agent, and the summary it reports: the
 * same for the embedded store and PostgreSQL, which differ only in how they replace an agent.
 * @param db the store as the summary names it.
 * @throws Error when `orgId` is not a UUID.
 */
export function planLocomoImport(
  conversations: readonly LocomoConversation[],
  orgId: string,
  db: string,
): { org: string; agents: LocomoAgentRows[]; summary: IngestSummary } {
  const org = canonicalUuid(orgId);
  if (org === null) throw new Error('org must be a UUID');
  const summary: IngestSummary = { db, org_id: org, agents: [], memories: 0, directives: 0 };
  const agents = conversations.map((conv) => {
    const memories = locomoMemories(conv, org);
    summary.agents.push({
      agent_id: conv.agentId,
      sample_id: conv.sampleId,
      file: conv.file,
      speakers: [conv.speakerA, conv.speakerB],
      memories: memories.length,
    });
    summary.memories += memories.length;
    summary.directives++;
    return { agentId: conv.agentId, memories, directive: locomoDirective(conv, org) };
  });
  return { org, agents, summary };
}

/**
 * Replaces each conversation's agent (memories + directive) in `store`, then merges the FTS5 index.
 * @param onAgent called after each agent is written: agents done, agents in all, memories written so far.
 */
export function ingestLocomo(
  store: EmbeddedStore,
  conversations: readonly LocomoConversation[],
  orgId: string,
  onAgent?: (done: number, total: number, memories: number) => void,
): IngestSummary {
  const { org, agents, summary } = planLocomoImport(conversations, orgId, store.path);
  let memories = 0;
  for (const [i, a] of agents.entries()) {
    store.replaceAgent(org, a.agentId, a.memories, a.directive);
    memories += a.memories.length;
    onAgent?.(i + 1, agents.length, memories);
  }
  // One transaction per agent leaves the FTS5 index in many segments (13 for LoCoMo); merging them once
  // after the import makes each search read one segment (460 → 340 µs a query).
  store.optimize();
  return summary;
}
