/** SearchMemories and RecordMemoryFeedback (contract.md §7a): small unary calls beside the pipeline. */
import type { Metadata } from '@grpc/grpc-js';
import type { RankingSettings } from '../config/ranking-settings.js';
import { compositeCandidates } from '../ranking/composite-rank.js';
import { compareCanonical } from '../ranking/score.js';
import { BranchError } from '../retrieval/branch-error.js';
import { FEEDBACK_KINDS, type FeedbackKind, type FeedbackStore } from '../retrieval/feedback.js';
import type { MemorySource, SourceHits } from '../retrieval/retrieve.js';
import { type ValidatedHits, validateHits } from '../retrieval/validate.js';
import type { FeedbackMetrics } from '../telemetry/feedback-metrics.js';
import { contentText } from '../text/content-bytes.js';
import { monotonicNow } from '../util/clock.js';
import { Errors, isIbexError } from '../wire/errors.js';
import type {
  Memory,
  RecordMemoryFeedbackRequest,
  RecordMemoryFeedbackResponse,
  SearchMemoriesRequest,
  SearchMemoriesResponse,
} from '../wire/proto.js';
import type { MemoryHit } from '../wire/types.js';
import { authorizeOrg } from './authorize-request.js';
import { roundMs } from './response-parts.js';
import { exceedsCodePoints, INVALID, LIMITS } from './validate.js';

/** Bounds of the two calls' inputs (contract.md §7a). */
export const MEMORY_RPC_LIMITS = {
  /** Most SearchMemories results; 0 asks for {@link MEMORY_RPC_LIMITS.defaultLimit}. */
  maxLimit: 100,
  defaultLimit: 10,
  /** In one SearchMemories filter. */
  maxCategories: 100,
  /** In one RecordMemoryFeedback. */
  maxMemoryIds: 100,
} as const;

/** The INVALID_ARGUMENT details of the two calls, each stated once (tests pin them). */
export const MEMORY_RPC_INVALID = {
  queryRequired: 'query is required',
  limit: (n: number) => `limit must be in 0..${MEMORY_RPC_LIMITS.maxLimit}, got ${n}`,
  minSimilarity: (x: number) => `min_similarity must be in [0, 1), got ${x}`,
  categories: `categories exceeds ${MEMORY_RPC_LIMITS.maxCategories} items`,
  tags: 'tags is not supported: memories carry no tags',
  memoryIdsRequired: 'memory_ids is required',
  memoryIdsCount: `memory_ids exceeds ${MEMORY_RPC_LIMITS.maxMemoryIds} items`,
  memoryId: (i: number) => `memory_ids[${i}] must be a UUID`,
  feedback: `feedback must be one of ${FEEDBACK_KINDS.join(', ')}`,
} as const;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

function requiredUuid(field: 'org_id' | 'agent_id', v: unknown): string {
  const value = str(v).trim();
  if (value === '') throw Errors.invalidArgument(field, INVALID.required(field));
  if (!UUID.test(value)) throw Errors.invalidArgument(field, INVALID.notUuid(field));
  return value.toLowerCase();
}

export interface ValidatedSearch {
  orgId: string;
  agentId: string;
  query: string;
  /** 1..100. */
  limit: number;
  /** In [0, 1) */
  minSimilarity: number;
  /** Exact category names; empty = every category. */
  categories: ReadonlySet<string>;
}

/**
 * Validates a SearchMemories request in field order, first failure wins. `tags` must be empty: the
 * stores keep no tags, and a filter that cannot be applied is refused rather than ignored.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` naming the field.
 */
export function validateSearchRequest(req: Partial<SearchMemoriesRequest>): ValidatedSearch {
  const orgId = requiredUuid('org_id', req.org_id);
  const agentId = requiredUuid('agent_id', req.agent_id);
  const query = str(req.query);
  if (query.trim() === '') throw Errors.invalidArgument('query', MEMORY_RPC_INVALID.queryRequired);
  if (exceedsCodePoints(query, LIMITS.queryChars)) throw Errors.invalidArgument('query', INVALID.query);
  const limit = Number(req.limit ?? 0);
  if (!Number.isInteger(limit) || limit < 0 || limit > MEMORY_RPC_LIMITS.maxLimit) {
    throw Errors.invalidArgument('limit', MEMORY_RPC_INVALID.limit(limit));
  }
  const minSimilarity = Number(req.min_similarity ?? 0);
  if (!Number.isFinite(minSimilarity) || minSimilarity < 0 || minSimilarity >= 1) {
    throw Errors.invalidArgument('min_similarity', MEMORY_RPC_INVALID.minSimilarity(minSimilarity));
  }
  const categories = req.categories ?? [];
  if (categories.length > MEMORY_RPC_LIMITS.maxCategories) {
    throw Errors.invalidArgument('categories', MEMORY_RPC_INVALID.categories);
  }
  if ((req.tags ?? []).length > 0) throw Errors.invalidArgument('tags', MEMORY_RPC_INVALID.tags);
  return {
    orgId,
    agentId,
    query,
    limit: limit === 0 ? MEMORY_RPC_LIMITS.defaultLimit : limit,
    minSimilarity,
    categories: new Set(categories.map(str)),
  };
}

export interface ValidatedFeedback {
  orgId: string;
  /** Canonical lower-case UUIDs, distinct, in first-seen order. */
  memoryIds: string[];
  kind: FeedbackKind;
}

/**
 * Validates a RecordMemoryFeedback request, first failure wins; a repeated id counts once.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` naming the field.
 */
export function validateFeedbackRequest(req: Partial<RecordMemoryFeedbackRequest>): ValidatedFeedback {
  const orgId = requiredUuid('org_id', req.org_id);
  const ids = req.memory_ids ?? [];
  if (ids.length === 0) throw Errors.invalidArgument('memory_ids', MEMORY_RPC_INVALID.memoryIdsRequired);
  if (ids.length > MEMORY_RPC_LIMITS.maxMemoryIds) {
    throw Errors.invalidArgument('memory_ids', MEMORY_RPC_INVALID.memoryIdsCount);
  }
  const memoryIds = new Set<string>();
  ids.forEach((raw, i) => {
    const id = str(raw).trim();
    if (!UUID.test(id)) throw Errors.invalidArgument('memory_ids', MEMORY_RPC_INVALID.memoryId(i));
    memoryIds.add(id.toLowerCase());
  });
  const kind = str(req.feedback).trim();
  if (!(FEEDBACK_KINDS as readonly string[]).includes(kind)) {
    throw Errors.invalidArgument('feedback', MEMORY_RPC_INVALID.feedback);
  }
  return { orgId, memoryIds: [...memoryIds], kind: kind as FeedbackKind };
}

export interface MemoryRpcDeps {
  memory: MemorySource;
  feedback: FeedbackStore;
  ranking: RankingSettings;
  /** `IBEX_CONTEXT_MAX_MEMORY_CHARS`: longer hits are dropped, as in retrieval. */
  maxMemoryChars: number;
  metrics: FeedbackMetrics;
}

/** A store failure as the caller's status: UNAVAILABLE (retryable), never INTERNAL for a dependency. */
function storeFailure(err: unknown): never {
  if (isIbexError(err)) throw err;
  const detail = err instanceof BranchError ? err.detail : 'store error';
  throw Errors.unavailable(`memory store unavailable: ${detail}`, err);
}

function createdAt(ms: number | undefined): string {
  return ms === undefined ? '' : new Date(ms).toISOString();
}

function isValidated(value: SourceHits): value is ValidatedHits {
  return !Array.isArray(value);
}

/**
 * SearchMemories (contract.md §7a): the store's lexical search, scoped like retrieval, filtered by
 * category and `min_similarity`, ordered by composite score (default weights), cut at `limit`.
 * @throws IbexError INVALID_ARGUMENT, PERMISSION_DENIED, UNAVAILABLE (the store failed or timed out).
 */
export async function searchMemories(
  deps: MemoryRpcDeps,
  request: Partial<SearchMemoriesRequest>,
  metadata: Metadata,
  signal: AbortSignal,
): Promise<SearchMemoriesResponse> {
  const start = monotonicNow();
  const req = validateSearchRequest(request);
  authorizeOrg(req.orgId, { metadata });
  const asked = Math.max(req.limit, deps.ranking.maxCandidates);
  let answer: SourceHits;
  try {
    answer = await deps.memory.search(req.orgId, req.agentId, req.query, signal, asked);
  } catch (err) {
    storeFailure(err);
  }
  const hits = isValidated(answer)
    ? answer.hits
    : validateHits(answer, req.orgId, req.agentId, { limit: asked, maxChars: deps.maxMemoryChars }).hits;
  const passed: MemoryHit[] = hits.filter(
    (h) => h.similarity >= req.minSimilarity && (req.categories.size === 0 || req.categories.has(h.category)),
  );
  const { candidates } = compositeCandidates([], passed, {
    weights: deps.ranking.weights,
    floor: 0,
    exponent: deps.ranking.relevanceExponent,
    nowMs: Date.now(),
  });
  // Canonical order (contract.md §8 step 1): ties answer the same on every call.
  candidates.sort(compareCanonical);
  const hitOf = new Map(passed.map((h) => [h.memory_id, h]));
  const memories: Memory[] = candidates.slice(0, req.limit).map((c) => ({
    id: c.memory_id,
    content: contentText(c.content) ?? '',
    category: c.category,
    confidence: c.confidence,
    composite_score: c.score,
    retrieval_count: Math.min(2 ** 31 - 1, hitOf.get(c.memory_id)?.inclusions ?? 0),
    created_at: createdAt(hitOf.get(c.memory_id)?.created_at_ms),
  }));
  return {
    memories,
    total_candidates: candidates.length,
    search_time_ms: roundMs(monotonicNow() - start),
  };
}

/**
 * RecordMemoryFeedback (contract.md §7a): moves the usefulness of the caller's org's memories by the fixed
 * step; other orgs' and unknown ids are counted, never named in the answer.
 * @throws IbexError INVALID_ARGUMENT, PERMISSION_DENIED, UNAVAILABLE.
 */
export async function recordMemoryFeedback(
  deps: MemoryRpcDeps,
  request: Partial<RecordMemoryFeedbackRequest>,
  metadata: Metadata,
): Promise<RecordMemoryFeedbackResponse> {
  const req = validateFeedbackRequest(request);
  authorizeOrg(req.orgId, { metadata });
  let updates: Awaited<ReturnType<FeedbackStore['recordFeedback']>>;
  try {
    updates = await deps.feedback.recordFeedback(req.orgId, req.memoryIds, req.kind);
  } catch (err) {
    storeFailure(err);
  }
  deps.metrics.feedback(req.kind, updates.length, req.memoryIds.length - updates.length);
  return {
    success: true,
    updates: updates.map((u) => ({
      memory_id: u.memoryId,
      previous_score: u.previous,
      new_score: u.current,
    })),
  };
}
