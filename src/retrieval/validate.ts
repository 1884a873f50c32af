/**
 * The one validation path for memory hits (contract.md §4.1, §4.3): HTTP bodies and embedded-store rows go
 * through the same checks and the same org/agent scoping. Hand-written rather than zod because it runs
 * on every hit of every request and must not allocate issue objects for the common valid case.
 */

import { type MemoryContent, utf8ExceedsCodePoints } from '../text/content-bytes.js';
import { canonicalUuid } from '../util/uuid.js';
import type { MemoryHit } from '../wire/types.js';
import { BranchErrors } from './branch-error.js';

/** Hot read size (contract.md §4.1 `limit=20`). */
export const HOT_LIMIT = 20;
/** Cold search size (contract.md §4.1 `limit: 10`). */
export const SEARCH_LIMIT = 10;
export { DEFAULT_MAX_MEMORY_CHARS } from '../wire/limits.js';

/** Room for the envelope around the results, bytes. */
const ENVELOPE_BYTES = 1024;
/** Room per item for everything but the content (ids, category, source, numbers, extra fields), bytes. */
const ITEM_OVERHEAD_BYTES = 4096;
/**
 * Bytes one code point of content may take in a JSON body: 6 for a `\uXXXX` escape of a BMP character
 * (raw UTF-8 takes at most 4). Only astral characters written as two escapes could exceed it.
 */
const JSON_BYTES_PER_CODE_POINT = 6;

/**
 * Response-body cap for a memory-service answer to `limit` items (contract.md §4.1): the envelope plus `limit`
 * items whose content is at the memory cap. Hot (20 items, 65,536 code points) → 7,947,264 bytes; cold
 * (10) → 3,974,144 bytes. A bigger body fails the branch (`response too large`).
 * @param limit items requested (contract.md §4.1: 20 hot, 10 cold).
 * @param maxChars `IBEX_CONTEXT_MAX_MEMORY_CHARS`, code points.
 * @returns bytes.
 */
export function maxBodyBytes(limit: number, maxChars: number): number {
  return ENVELOPE_BYTES + limit * (maxChars * JSON_BYTES_PER_CODE_POINT + ITEM_OVERHEAD_BYTES);
}

/**
 * Whether `text` has more than `max` code points, without allocating and reading at most `2 × max + 1`
 * UTF-16 units (a string of ≤ max units cannot exceed; one of > 2 × max units must).
 */
export function exceedsCodePoints(text: string, max: number): boolean {
  const units = text.length;
  if (units <= max) return false;
  if (units > 2 * max) return true;
  let points = 0;
  for (let i = 0; i < units; i++) {
    const c = text.charCodeAt(i);
    // A high surrogate followed by a low one is one code point; a lone surrogate counts as one.
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < units) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    if (++points > max) return true;
  }
  return false;
}

/** {@link exceedsCodePoints} for a content held as text or as UTF-8 bytes (content-bytes.ts). */
export function contentExceedsCodePoints(content: MemoryContent, max: number): boolean {
  return typeof content === 'string' ? exceedsCodePoints(content, max) : utf8ExceedsCodePoints(content, max);
}

/** Bounds applied while validating a branch's items (contract.md §4.1). */
export interface HitLimits {
  /** Items requested: later items are ignored (not validated, not scored) and counted. */
  limit: number;
  /** `IBEX_CONTEXT_MAX_MEMORY_CHARS`: longer content is dropped as `oversize`. Code points. */
  maxChars: number;
}

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
  /** Otherwise valid items dropped because their content exceeds the memory cap (reason `oversize`). */
  oversize: number;
  /** Items past the requested limit, not looked at. */
  ignored: number;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unitInterval(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 && value <= 1;
}

/**
 * Checks one item (contract.md §4.1): ids UUID strings (returned lower-case), content/category/source strings,
 * confidence and similarity finite in [0,1], rank an integer ≥ 1. A content may also be UTF-8 bytes, as a
 * store-read thread sends it (content-bytes.ts); JSON cannot produce that.
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
  if (typeof content !== 'string' && !(content instanceof Uint8Array)) return null;
  if (typeof category !== 'string' || typeof source !== 'string') return null;
  if (!unitInterval(confidence) || !unitInterval(similarity)) return null;
  if (typeof rank !== 'number' || !Number.isSafeInteger(rank) || rank < 1) return null;
  const created = memory.created_at;
  const createdAtMs =
    typeof created === 'string' ? Date.parse(created) : typeof created === 'number' ? created : Number.NaN;
  const hit: MemoryHit = {
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
  // Recency input (contract.md §7 composite); a missing or unreadable date leaves it unset (recency 0).
  if (Number.isFinite(createdAtMs)) hit.created_at_ms = createdAtMs;
  // Usefulness and frequency inputs (contract.md §7); an unreadable value is left unset (neutral / 0),
  // not a reason to drop a hit whose other fields are sound.
  if (unitInterval(memory.usefulness)) hit.usefulness = memory.usefulness;
  const count = memory.retrieval_count;
  if (typeof count === 'number' && Number.isSafeInteger(count) && count >= 0) hit.inclusions = count;
  return hit;
}

/**
 * An embedded-store row over the content cap: the store sends it without its text (`memory.content`
 * null, `oversize: true`, contract.md §4.3) so that no thread reads it; it counts as `oversize`, not invalid.
 */
function isOversizeRow(item: unknown): boolean {
  return isRecord(item) && item.oversize === true && isRecord(item.memory) && item.memory.content === null;
}

const UNBOUNDED: HitLimits = { limit: Number.POSITIVE_INFINITY, maxChars: Number.POSITIVE_INFINITY };

/**
 * Validates a branch's items and keeps only the request's org and agent: a retrieval never widens
 * visibility (contract.md §4.1). Order is preserved. Only the first `limits.limit` items are looked at; a hit
 * whose content exceeds `limits.maxChars` code points is dropped as `oversize` (checked after shape,
 * before scoping: the work per item is bounded by the cap, never by the text's length).
 * @param orgId request org, any case (compared canonically).
 * @param agentId request agent, any case.
 */
export function validateHits(
  items: RawHits,
  orgId: string,
  agentId: string,
  limits: HitLimits = UNBOUNDED,
): ValidatedHits {
  const org = orgId.toLowerCase();
  const agent = agentId.toLowerCase();
  const hits: MemoryHit[] = [];
  let invalid = 0;
  let foreign = 0;
  let oversize = 0;
  const n = Math.min(items.length, limits.limit);
  for (let i = 0; i < n; i++) {
    const item = items[i];
    const hit = validateHit(item);
    if (hit === null) {
      if (isOversizeRow(item)) oversize++;
      else invalid++;
    } else if (contentExceedsCodePoints(hit.content, limits.maxChars)) oversize++;
    else if (hit.org_id !== org || hit.agent_id !== agent) foreign++;
    else hits.push(hit);
  }
  return { hits, invalid, foreign, oversize, ignored: items.length - n };
}

/**
 * Branch detail for dropped and ignored items: `dropped 1 invalid, 2 foreign`, `dropped 2 oversize`,
 * `ignored 4980 past limit`, both joined by `; `, or "".
 */
export function droppedDetail(invalid: number, foreign: number, oversize = 0, ignored = 0): string {
  const parts: string[] = [];
  if (invalid > 0) parts.push(`${invalid} invalid`);
  if (foreign > 0) parts.push(`${foreign} foreign`);
  if (oversize > 0) parts.push(`${oversize} oversize`);
  const dropped = parts.length === 0 ? '' : `dropped ${parts.join(', ')}`;
  if (ignored === 0) return dropped;
  return dropped === '' ? `ignored ${ignored} past limit` : `${dropped}; ignored ${ignored} past limit`;
}

/**
 * Decodes and validates one memory-service body (contract.md §4.1): UTF-8 → JSON → envelope → the first
 * `limits.limit` items validated and scoped. Pure and synchronous: runs inline for small bodies and in
 * the body-decoder thread for large ones (see `body-decoder.ts`).
 * @param body the raw response body, at most {@link maxBodyBytes} bytes.
 * @throws BranchError `invalid JSON` or `bad shape: …`.
 */
export function decodeMemoryBody(
  body: Uint8Array,
  orgId: string,
  agentId: string,
  limits: HitLimits,
): ValidatedHits {
  let parsed: unknown;
  try {
    parsed = JSON.parse(utf8.decode(body));
  } catch (err) {
    throw BranchErrors.invalidJson(err);
  }
  return validateHits(unwrapMemoryResponse(parsed), orgId, agentId, limits);
}

const utf8 = new TextDecoder('utf-8');

/**
 * Unwraps the memory service envelope `{"data": {"results": [...]}}` (contract.md §4.1).
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
