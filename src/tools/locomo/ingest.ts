/**
 * LoCoMo conversations as store rows (contract.md §4.3): one agent per conversation, every dialogue turn an
 * `episodic` memory `<speaker>: <text>`, every session summary a `factual` memory, one directive per
 * agent; each agent is replaced as a whole, so re-running an import gives the same store. One code path
 * for every store: the rows go to the {@link AgentWriter} the caller chose (embedded or PostgreSQL).
 */
import type { AgentWriter } from '../../retrieval/ports.js';
import type { DirectiveRow, MemoryRow } from '../../retrieval/store-rows.js';
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

/** Options of {@link ingestLocomo}. */
export interface IngestOptions {
  /** The store as the summary names it (a file path, or `postgres:<schema>`: never a URL, which may hold a password). */
  db: string;
  /** Called after each agent is written: agents done, agents in all, memories written so far. */
  onAgent?: (done: number, total: number, memories: number) => void;
}

/**
 * Converts `conversations` into rows and replaces each conversation's agent (memories + directive) through
 * `writer`, one agent at a time, then lets the writer finish the import ({@link AgentWriter.finishImport}).
 * @returns the summary the CLI prints: the same for every writer but for `db`.
 * @throws Error when `orgId` is not a UUID (nothing written); the writer's error when a write fails (the
 *   agents before it stay written, that one is rolled back).
 */
export async function ingestLocomo(
  writer: AgentWriter,
  conversations: readonly LocomoConversation[],
  orgId: string,
  options: IngestOptions,
): Promise<IngestSummary> {
  const org = canonicalUuid(orgId);
  if (org === null) throw new Error('org must be a UUID');
  const summary: IngestSummary = { db: options.db, org_id: org, agents: [], memories: 0, directives: 0 };
  for (const [i, conv] of conversations.entries()) {
    const memories = locomoMemories(conv, org);
    await writer.replaceAgent(org, conv.agentId, memories, locomoDirective(conv, org));
    summary.agents.push({
      agent_id: conv.agentId,
      sample_id: conv.sampleId,
      file: conv.file,
      speakers: [conv.speakerA, conv.speakerB],
      memories: memories.length,
    });
    summary.memories += memories.length;
    summary.directives++;
    options.onAgent?.(i + 1, conversations.length, summary.memories);
  }
  await writer.finishImport();
  return summary;
}
