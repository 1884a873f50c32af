/**
 * The one validation path for memory hits (SPEC §4.1, §4.3): HTTP bodies and embedded-store rows go
 * through the same checks and the same org/agent scoping. Hand-written rather than zod because it runs
 * on every hit of every request and must not allocate issue objects for the common valid case.
 */
import type { MemoryHit } from '../types.js';
import { BranchErrors } from './branch-error.js';
import { canonicalUuid } from './uuid.js';

/** Hot read size (SPEC §4.1 `limit=20`). */
export const HOT_LIMIT = 20;
/** Cold search size (SPEC §4.1 `limit: 10`). */
export const SEARCH_LIMIT = 10;

/**
 * Items as a source received them, before validation: `results` of an HTTP body or embedded-store rows,
 * each expected to be `{memory: {id, org_id, agent_id, content, category, confidence, ...}, similarity,
 * rank, source}`.
 */
export type RawHits = readonly unknown[];

/** Output of {@link validateHits}. */
export interface ValidatedHits {
  /** Valid hits of the requested org and agent, in the source's order. */
  hits: MemoryHit[];
  /** Items dropped for a wrong shape or value. */
  invalid: number;
  /** Valid items dropped because their org_id or agent_id is not the request's. */
  foreign: number;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unitInterval(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 && value <= 1;
}

/**
 * Checks one item (SPEC §4.1): ids UUID strings (returned lower-case), content/category/source strings,
 * confidence and similarity finite in [0,1], rank an integer ≥ 1.
 * @returns the hit, or `null` when anything is off. Never throws.
 */
export function validateHit(item: unknown): MemoryHit | null {
  if (!isRecord(item)) return null;
  const memory = item.memory;
  if (!isRecord(memory)) return null;
  const memoryId = canonicalUuid(memory.id);
  const orgId = canonicalUuid(memory.org_id);
  const agentId = canonicalUuid(memory.agent_id);
  if (memoryId === null || orgId === null || agentId === null) return null;
  const { content, category, confidence } = memory;
  const { similarity, rank, source } = item;
  if (typeof content !== 'string' || typeof category !== 'string' || typeof source !== 'string') return null;
  if (!unitInterval(confidence) || !unitInterval(similarity)) return null;
  if (typeof rank !== 'number' || !Number.isSafeInteger(rank) || rank < 1) return null;
  return {
    memory_id: memoryId,
    org_id: orgId,
    agent_id: agentId,
    content,
    category,
    confidence,
    similarity,
    rank,
    source,
  };
}

/**
 * Validates a branch's items and keeps only the request's org and agent: a retrieval never widens
 * visibility (SPEC §4.1). Order is preserved.
 * @param orgId request org, any case (compared canonically).
 * @param agentId request agent, any case.
 */
export function validateHits(items: RawHits, orgId: string, agentId: string): ValidatedHits {
  const org = orgId.toLowerCase();
  const agent = agentId.toLowerCase();
  const hits: MemoryHit[] = [];
  let invalid = 0;
  let foreign = 0;
  for (const item of items) {
    const hit = validateHit(item);
    if (hit === null) invalid++;
    else if (hit.org_id !== org || hit.agent_id !== agent) foreign++;
    else hits.push(hit);
  }
  return { hits, invalid, foreign };
}

/** Branch detail for dropped items: `dropped 1 invalid, 2 foreign`, `dropped 2 invalid`, or "". */
export function droppedDetail(invalid: number, foreign: number): string {
  const parts: string[] = [];
  if (invalid > 0) parts.push(`${invalid} invalid`);
  if (foreign > 0) parts.push(`${foreign} foreign`);
  return parts.length === 0 ? '' : `dropped ${parts.join(', ')}`;
}

/**
 * Unwraps the memory service envelope `{"data": {"results": [...]}}` (SPEC §4.1).
 * @throws BranchError `bad shape: …` when the envelope is not that shape.
 */
export function unwrapMemoryResponse(body: unknown): RawHits {
  if (!isRecord(body)) throw BranchErrors.badShape('body is not an object');
  const data = body.data;
  if (!isRecord(data)) throw BranchErrors.badShape('data is not an object');
  const results = data.results;
  if (!Array.isArray(results)) throw BranchErrors.badShape('data.results is not an array');
  return results;
}
