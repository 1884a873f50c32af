// LoCoMo conversations as store rows (contract.md §4.3): turns episodic, summaries factual, a directive per
// agent; each agent is replaced whole, so re-running an import gives the same store, on any AgentWriter.
import type { AgentWriter } from '../../retrieval/ports.js';
import type { DirectiveRow, MemoryRow } from '../../retrieval/store-rows.js';
import { canonicalUuid, uuidV5 } from '../../util/uuid.js';
import { LOCOMO_MEMORY_NS, type LocomoConversation, locomoConfidence } from './dataset.js';

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

export interface IngestOptions {
  /** The store as the summary names it (path or `postgres:<schema>`, never a URL: passwords). */
  db: string;
  onAgent?: (done: number, total: number, memories: number) => void;
}

/**
 * Replaces each conversation's agent through `writer`, one at a time, then finishes the import.
 * @throws Error when `orgId` is not a UUID (nothing written); the writer's error (earlier agents stay).
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
