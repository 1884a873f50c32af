// Requests from LoCoMo conversations (shared/datasets/README.md) for `replay` and `load --locomo`: one
// per later-session turn, recent messages = the turns before it, org/agent = the ids `ingest` gave.
import { CapabilityCatalog } from '../../budget/catalog.js';
import type { AssembleContextRequestInput, Message } from '../../wire/proto.js';
import { LOCOMO_ORG_ID, type LocomoConversation, readLocomo } from '../locomo/dataset.js';
import { cyclingSource, type RequestSource } from './request-source.js';

export interface LocomoRequestOptions {
  orgId?: string;
  models?: readonly string[];
  historyTurns?: number;
  /** Fraction of each conversation's sessions skipped (default 1/3): later ones have memories to find. */
  skipFraction?: number;
}

export interface LocomoRequest {
  request: AssembleContextRequestInput;
  sampleId: string;
  diaId: string;
}

/**
 * Builds the requests, conversations interleaved so that a `--limit` prefix still covers every agent;
 * models rotate in output order. The last session is always kept.
 */
export function locomoRequests(
  conversations: readonly LocomoConversation[],
  opts: LocomoRequestOptions = {},
): LocomoRequest[] {
  const orgId = opts.orgId ?? LOCOMO_ORG_ID;
  const models = opts.models ?? CapabilityCatalog.create().modelIds();
  if (models.length === 0) throw new Error('locomoRequests: no models to rotate over');
  const historyTurns = Math.max(0, opts.historyTurns ?? 10);
  const skipFraction = Math.min(1, Math.max(0, opts.skipFraction ?? 1 / 3));

  const pending: { conv: LocomoConversation; query: string; history: Message[]; diaId: string }[][] = [];
  for (const conv of conversations) {
    const skip = Math.min(conv.sessions.length - 1, Math.floor(conv.sessions.length * skipFraction));
    const flat: Message[] = [];
    const items: (typeof pending)[number] = [];
    conv.sessions.forEach((session, s) => {
      for (const turn of session.turns) {
        if (s >= skip) {
          items.push({
            conv,
            query: turn.text,
            history: historyTurns === 0 ? [] : flat.slice(-historyTurns),
            diaId: turn.diaId,
          });
        }
        flat.push({ role: turn.speaker, content: turn.text });
      }
    });
    pending.push(items);
  }

  const out: LocomoRequest[] = [];
  const longest = Math.max(0, ...pending.map((p) => p.length));
  for (let i = 0; i < longest; i++) {
    for (const items of pending) {
      const item = items[i];
      if (item === undefined) continue;
      const n = out.length;
      out.push({
        sampleId: item.conv.sampleId,
        diaId: item.diaId,
        request: {
          org_id: orgId,
          agent_id: item.conv.agentId,
          session_id: `locomo:${item.conv.sampleId}`,
          query: item.query,
          model: models[n % models.length]!,
          recent_messages: item.history,
          request_id: `locomo:${item.conv.sampleId}:${item.diaId}`,
        },
      });
    }
  }
  return out;
}

/** A cycling source of a LoCoMo directory's later-session turns. @throws Error when none is usable. */
export async function locomoSource(dir: string, opts: LocomoRequestOptions = {}): Promise<RequestSource> {
  const conversations = await readLocomo(dir);
  const requests = locomoRequests(conversations, opts).map((r) => r.request);
  return cyclingSource(`locomo(${conversations.length} conversations, ${requests.length} turns)`, requests);
}
