/**
 * Request validation at the gRPC boundary (SPEC §11). Checks run in the SPEC's order and the first
 * failure wins, so a client always sees the same message for the same request.
 */
import { Errors } from '../errors.js';
import type { ChatMessage } from '../types.js';
import type { AssembleContextRequestInput, Timestamp, WireInput } from './proto.js';

/** Limits of SPEC §11, in Unicode code points (items for `recent_messages`). */
export const LIMITS = {
  modelChars: 256,
  queryChars: 8192,
  recentMessages: 100,
  roleChars: 64,
  contentChars: 32_768,
  maxMemories: 100,
} as const;

/** The caller principal as forwarded by the auth layer; not interpreted here. */
export interface ValidatedPrincipal {
  orgId: string;
  principalId: string;
  agentId: string;
  principalType: string;
  authzSnapshotId: string;
  authzSnapshotDigest: string;
  authority: string;
  /** Epoch ms, or null when absent. */
  issuedAtMs: number | null;
  /** Epoch ms, or null when absent. */
  expiresAtMs: number | null;
  requestId: string;
  traceId: string;
  source: string;
  /** int64 permission bits as a decimal string (JSON-safe, unlike bigint); `BigInt()` it to test bits. */
  permissions: string;
  tokenId: string;
}

/** An AssembleContext request after SPEC §11 validation. */
export interface ValidatedRequest {
  /** Canonical lower-case UUID. */
  orgId: string;
  /** Canonical lower-case UUID. */
  agentId: string;
  sessionId: string;
  /** As given (≤ 8192 code points); may be empty (the cold branch then records `empty_query`). */
  query: string;
  /** Trimmed, non-empty, ≤ 256 code points. Not yet looked up in the catalog. */
  model: string;
  directiveVersionId: string;
  /** As given; only 0 < n < usable_budget has an effect (SPEC §6). */
  availableTokens: number;
  /** ≤ 100 messages, raw role and content. */
  recentMessages: ChatMessage[];
  skipHot: boolean;
  skipCold: boolean;
  /** 0 = no cap, else 1..100. */
  maxMemories: number;
  requestId: string;
  traceId: string;
  spanId: string;
  /** Present iff the request carried `principal_context`. */
  principal?: ValidatedPrincipal;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * True when `s` has more than `limit` Unicode code points (a surrogate pair is one; a lone surrogate is
 * one, as in `for…of`). Avoids counting when UTF-16 length alone decides, which is almost always.
 */
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

function requiredUuid(field: 'org_id' | 'agent_id', raw: unknown): string {
  const value = str(raw).trim();
  if (value === '') throw Errors.invalidArgument(field, `${field} is required`);
  if (!UUID.test(value)) throw Errors.invalidArgument(field, `${field} must be a UUID`);
  return value.toLowerCase();
}

function timestampMs(ts: WireInput<Timestamp> | null | undefined): number | null {
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

/**
 * Validates an AssembleContext request (SPEC §11) and returns its normalized form.
 *
 * Order: org_id, agent_id, model (required, length), query length, recent_messages count, every
 * message's role, every message's content, max_memories. "Required" means non-empty after trim; UUIDs
 * are accepted in any case and returned lower-case; lengths are in code points. The catalog lookup
 * (`unknown model '<model>'`) is not done here.
 * Missing fields are treated as their proto3 defaults, so partial objects are accepted.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` whose message is the SPEC §11 detail string.
 */
export function validateAssembleRequest(req: AssembleContextRequestInput): ValidatedRequest {
  const orgId = requiredUuid('org_id', req.org_id);
  const agentId = requiredUuid('agent_id', req.agent_id);

  const model = str(req.model).trim();
  if (model === '') throw Errors.invalidArgument('model', 'model is required');
  if (exceedsCodePoints(model, LIMITS.modelChars)) {
    throw Errors.invalidArgument('model', `model exceeds ${LIMITS.modelChars} characters`);
  }

  const query = str(req.query);
  if (exceedsCodePoints(query, LIMITS.queryChars)) {
    throw Errors.invalidArgument('query', `query exceeds ${LIMITS.queryChars} characters`);
  }

  const messages = req.recent_messages ?? [];
  if (messages.length > LIMITS.recentMessages) {
    throw Errors.invalidArgument('recent_messages', `recent_messages exceeds ${LIMITS.recentMessages} items`);
  }
  const recentMessages: ChatMessage[] = messages.map((m) => ({
    role: str(m?.role),
    content: str(m?.content),
  }));
  // Two passes: SPEC §11 orders every role check before every content check.
  for (const m of recentMessages) {
    if (exceedsCodePoints(m.role, LIMITS.roleChars)) {
      throw Errors.invalidArgument('message.role', `message.role exceeds ${LIMITS.roleChars} characters`);
    }
  }
  for (const m of recentMessages) {
    if (exceedsCodePoints(m.content, LIMITS.contentChars)) {
      throw Errors.invalidArgument(
        'message.content',
        `message.content exceeds ${LIMITS.contentChars} characters`,
      );
    }
  }

  const options = req.options ?? {};
  const maxMemories = Number(options.max_memories ?? 0);
  if (!Number.isInteger(maxMemories) || maxMemories < 0 || maxMemories > LIMITS.maxMemories) {
    throw Errors.invalidArgument(
      'max_memories',
      `max_memories must be in 0..${LIMITS.maxMemories}, got ${maxMemories}`,
    );
  }

  const validated: ValidatedRequest = {
    orgId,
    agentId,
    sessionId: str(req.session_id),
    query,
    model,
    directiveVersionId: str(req.directive_version_id),
    availableTokens: Number(req.available_tokens ?? 0) | 0,
    recentMessages,
    skipHot: options.skip_hot_memories === true,
    skipCold: options.skip_cold_memories === true,
    maxMemories,
    requestId: str(req.request_id),
    traceId: str(req.trace_id),
    spanId: str(req.span_id),
  };
  const p = req.principal_context;
  if (p != null) {
    validated.principal = {
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
  return validated;
}
