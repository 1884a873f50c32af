/** Request validation (contract.md §11): checks in the contract's order, first failure wins. */

import type { Timestamp } from '../generated/proto/google/protobuf/Timestamp.js';
import type { PrincipalContext as PrincipalContextInput } from '../generated/proto/ibex/auth/v1/PrincipalContext.js';
import { type RequestWeights, requestWeights } from '../ranking/request-weights.js';
import { Errors } from '../wire/errors.js';
import { LIMITS } from '../wire/limits.js';
import type { AssembleContextRequestInput } from '../wire/proto.js';
import type { ChatMessage } from '../wire/types.js';
import {
  CONTENT_OVER,
  checkHistoryContents,
  decodeHistory,
  encodeHistory,
  type HistoryBytes,
  type WireAssembleRequest,
  type WireString,
} from './wire-request.js';

export { LIMITS } from '../wire/limits.js';

/** The caller principal as forwarded by the auth layer; not interpreted here. */
export interface ValidatedPrincipal {
  orgId: string;
  principalId: string;
  agentId: string;
  principalType: string;
  authzSnapshotId: string;
  authzSnapshotDigest: string;
  authority: string;
  /** Epoch ms, null when absent. */
  issuedAtMs: number | null;
  /** Epoch ms, null when absent. */
  expiresAtMs: number | null;
  requestId: string;
  traceId: string;
  source: string;
  /** int64 permission bits as a decimal string; `BigInt()` it to test bits. */
  permissions: string;
  tokenId: string;
}

/** An AssembleContext request after contract.md §11 validation. */
export interface ValidatedRequest {
  /** Canonical lower-case UUID, as agentId. */
  orgId: string;
  agentId: string;
  sessionId: string;
  /** As given (≤ 8192 code points); may be empty. */
  query: string;
  /** Trimmed, non-empty, ≤ 256 code points; not yet looked up in the catalog. */
  model: string;
  directiveVersionId: string;
  /** As given; only 0 < n < usable_budget has an effect (contract.md §6) */
  availableTokens: number;
  /** ≤ 100 messages as UTF-8 byte spans; contents are checked unless `history.contentPending`. */
  history: HistoryBytes;
  /** `history` decoded on every access (tools, tests and the L2 degraded answer). */
  readonly recentMessages: ChatMessage[];
  skipHot: boolean;
  skipCold: boolean;
  /** 0 = no cap, else 1..100. */
  maxMemories: number;
  /** AssemblyOptions weights (fields 3–6) when any is set, checked; null = the service's defaults. */
  weights?: RequestWeights | null;
  requestId: string;
  traceId: string;
  spanId: string;
  /** Present iff the request carried `principal_context`. */
  principal?: ValidatedPrincipal;
}

/** Adds the non-enumerable `recentMessages` getter, so copies and logs never materialise history. */
export function withHistoryView(req: Omit<ValidatedRequest, 'recentMessages'>): ValidatedRequest {
  return Object.defineProperty(req, 'recentMessages', {
    get: () => decodeHistory(req.history),
    enumerable: false,
  }) as ValidatedRequest;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True when `s` has more than `limit` code points (a lone surrogate counts as one, as in `for…of`). */
export function exceedsCodePoints(s: string, limit: number): boolean {
  if (s.length <= limit) return false;
  if (s.length > 2 * limit) return true;
  let count = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    if (++count > limit) return true;
  }
  return false;
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** contract.md §11's INVALID_ARGUMENT details, shared by the object and wire paths (vectors pin them). */
export const INVALID = {
  required: (field: 'org_id' | 'agent_id' | 'model') => `${field} is required`,
  notUuid: (field: 'org_id' | 'agent_id') => `${field} must be a UUID`,
  model: `model exceeds ${LIMITS.modelChars} characters`,
  query: `query exceeds ${LIMITS.queryChars} characters`,
  recentMessages: `recent_messages exceeds ${LIMITS.recentMessages} items`,
  role: `message.role exceeds ${LIMITS.roleChars} characters`,
  content: CONTENT_OVER,
  maxMemories: (n: number) => `max_memories must be in 0..${LIMITS.maxMemories}, got ${n}`,
} as const;

function requiredUuid(field: 'org_id' | 'agent_id', s: WireString): string {
  // An undecoded id (over 64 KiB) cannot be a UUID.
  const value = s.text?.trim() ?? null;
  if (value === '') throw Errors.invalidArgument(field, INVALID.required(field));
  if (value === null || !UUID.test(value)) throw Errors.invalidArgument(field, INVALID.notUuid(field));
  return value.toLowerCase();
}

function timestampMs(ts: Timestamp | null | undefined): number | null {
  if (ts == null) return null;
  return Number(ts.seconds ?? 0) * 1000 + Math.trunc(Number(ts.nanos ?? 0) / 1e6);
}

function int64(v: unknown): string {
  try {
    return BigInt(typeof v === 'string' || typeof v === 'number' || typeof v === 'bigint' ? v : 0).toString();
  } catch {
    return '0';
  }
}

function wireString(v: unknown): WireString {
  const text = str(v);
  return { text, bytes: Buffer.byteLength(text) };
}

/** A request object in the wire decoder's shape, so one validator serves both paths. */
function fromObject(req: AssembleContextRequestInput): WireAssembleRequest {
  const messages = req.recent_messages ?? [];
  const counted = messages.length <= LIMITS.recentMessages;
  const history: ChatMessage[] = counted
    ? messages.map((m) => ({ role: str(m?.role), content: str(m?.content) }))
    : [];
  const options = req.options ?? {};
  return {
    refused: null,
    org_id: wireString(req.org_id),
    agent_id: wireString(req.agent_id),
    model: wireString(req.model),
    query: wireString(req.query),
    session_id: str(req.session_id),
    directive_version_id: str(req.directive_version_id),
    available_tokens: Number(req.available_tokens ?? 0),
    request_id: str(req.request_id),
    trace_id: str(req.trace_id),
    span_id: str(req.span_id),
    skip_hot_memories: options.skip_hot_memories === true,
    skip_cold_memories: options.skip_cold_memories === true,
    max_memories: Number(options.max_memories ?? 0),
    // float32 on the wire: the object path rounds alike.
    weights: [
      Math.fround(Number(options.recency_weight ?? 0)),
      Math.fround(Number(options.relevance_weight ?? 0)),
      Math.fround(Number(options.usefulness_weight ?? 0)),
      Math.fround(Number(options.confidence_weight ?? 0)),
    ],
    principal_context: null,
    messageCount: messages.length,
    history: { ...encodeHistory(history), contentPending: false },
    roleOver: history.some((m) => exceedsCodePoints(m.role, LIMITS.roleChars)),
    contentOver: history.some((m) => exceedsCodePoints(m.content, LIMITS.contentChars)),
    stoppedEarly: false,
  };
}

/**
 * Validates an AssembleContext request object (the object path of tools, tests and warm-up) via
 * {@link validateWireRequest}. Missing fields take their proto3 defaults; UUIDs come back lower-case; the
 * catalog lookup is not done here.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` whose message is the contract.md §11 detail string.
 */
export function validateAssembleRequest(req: AssembleContextRequestInput): ValidatedRequest {
  const validated = validateWireRequest(fromObject(req));
  if (req.principal_context != null) validated.principal = principalOf(req.principal_context);
  return validated;
}

function principalOf(p: PrincipalContextInput): ValidatedPrincipal {
  return {
    orgId: str(p.org_id),
    principalId: str(p.principal_id),
    agentId: str(p.agent_id),
    principalType: str(p.principal_type),
    authzSnapshotId: str(p.authz_snapshot_id),
    authzSnapshotDigest: str(p.authz_snapshot_digest),
    authority: str(p.authority),
    issuedAtMs: timestampMs(p.issued_at),
    expiresAtMs: timestampMs(p.expires_at),
    requestId: str(p.request_id),
    traceId: str(p.trace_id),
    source: str(p.source),
    permissions: int64(p.permissions),
    tokenId: str(p.token_id),
  };
}

/**
 * Validates a wire-decoded request in the contract.md §11 order, deciding lengths from byte lengths where
 * they decide; contents of 32,768 < bytes ≤ 131,072 are left to the CPU stage (`history.contentPending`).
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` with the §11 detail or the wire's refusal.
 */
export function validateWireRequest(w: WireAssembleRequest): ValidatedRequest {
  if (w.refused) throw Errors.invalidArgument(w.refused.field, w.refused.message);
  const countOver = w.messageCount > LIMITS.recentMessages;
  const countError = () => Errors.invalidArgument('recent_messages', INVALID.recentMessages);
  if (countOver && w.stoppedEarly) throw countError();

  const orgId = requiredUuid('org_id', w.org_id);
  const agentId = requiredUuid('agent_id', w.agent_id);
  const model = w.model.text === null ? null : w.model.text.trim();
  if (model === '') throw Errors.invalidArgument('model', INVALID.required('model'));
  if (model === null || exceedsCodePoints(model, LIMITS.modelChars)) {
    throw Errors.invalidArgument('model', INVALID.model);
  }
  const query = w.query.text;
  if (query === null || exceedsCodePoints(query, LIMITS.queryChars)) {
    throw Errors.invalidArgument('query', INVALID.query);
  }
  if (countOver) throw countError();
  if (w.roleOver) throw Errors.invalidArgument('message.role', INVALID.role);
  if (w.contentOver) throw Errors.invalidArgument('message.content', INVALID.content);
  const maxMemories = w.max_memories;
  if (!Number.isInteger(maxMemories) || maxMemories < 0 || maxMemories > LIMITS.maxMemories) {
    if (checkHistoryContents(w.history)) throw Errors.invalidArgument('message.content', INVALID.content);
    throw Errors.invalidArgument('max_memories', INVALID.maxMemories(maxMemories));
  }
  let weights: RequestWeights | null;
  try {
    weights = requestWeights(w.weights);
  } catch (err) {
    // A pending over-long content is reported before max_memories (contract.md §11 order).
    if (checkHistoryContents(w.history)) throw Errors.invalidArgument('message.content', INVALID.content);
    throw err;
  }
  const validated = withHistoryView({
    orgId,
    agentId,
    sessionId: w.session_id,
    query,
    model,
    directiveVersionId: w.directive_version_id,
    availableTokens: w.available_tokens | 0,
    history: w.history,
    skipHot: w.skip_hot_memories,
    skipCold: w.skip_cold_memories,
    maxMemories,
    weights,
    requestId: w.request_id,
    traceId: w.trace_id,
    spanId: w.span_id,
  });
  if (w.principal_context != null) validated.principal = principalOf(w.principal_context);
  return validated;
}
