/** The one validation path for memory hits (contract.md §4.1, §4.3); hand-written: it runs on every hit. */

import { type MemoryContent, utf8ExceedsCodePoints } from '../text/content-bytes.js';
import { canonicalUuid } from '../util/uuid.js';
import type { MemoryHit } from '../wire/types.js';
import { BranchErrors } from './branch-error.js';

/** contract.md §4.1 sizes. */
export const HOT_LIMIT = 20;
export const SEARCH_LIMIT = 10;
export { DEFAULT_MAX_MEMORY_CHARS } from '../wire/limits.js';

const ENVELOPE_BYTES = 1024;
const ITEM_OVERHEAD_BYTES = 4096;
/** `\uXXXX` of a BMP character; raw UTF-8 takes at most 4. */
const JSON_BYTES_PER_CODE_POINT = 6;

/** Response-body cap, bytes, for `limit` items of `maxChars` code points (contract.md §4.1). */
export function maxBodyBytes(limit: number, maxChars: number): number {
  return ENVELOPE_BYTES + limit * (maxChars * JSON_BYTES_PER_CODE_POINT + ITEM_OVERHEAD_BYTES);
}

/** Whether `text` has more than `max` code points; reads at most `2 × max + 1` units. */
export function exceedsCodePoints(text: string, max: number): boolean {
  const units = text.length;
  if (units <= max) return false;
  if (units > 2 * max) return true;
  let points = 0;
  for (let i = 0; i < units; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < units) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    if (++points > max) return true;
  }
  return false;
}

export function contentExceedsCodePoints(content: MemoryContent, max: number): boolean {
  return typeof content === 'string' ? exceedsCodePoints(content, max) : utf8ExceedsCodePoints(content, max);
}

export interface HitLimits {
  limit: number;
  /** Code points; longer content is dropped as `oversize`. */
  maxChars: number;
}

/** `results` of an HTTP body, or embedded-store rows. */
export type RawHits = readonly unknown[];

export interface ValidatedHits {
  hits: MemoryHit[];
  invalid: number;
  foreign: number;
  oversize: number;
  /** Past the limit, not looked at. */
  ignored: number;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unitInterval(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 && value <= 1;
}

/** Checks one item (contract.md §4.1); content may be UTF-8 bytes. Never throws. */
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
  if (Number.isFinite(createdAtMs)) hit.created_at_ms = createdAtMs;
  setScoringInputs(hit, memory.usefulness, memory.retrieval_count);
  return hit;
}

/**
 * Sets a hit's usefulness (a number in [0,1]) and inclusion count (a safe integer ≥ 0) from raw values. An
 * unreadable one is left unset (neutral / 0), not a reason to drop the hit.
 */
export function setScoringInputs(hit: MemoryHit, usefulness: unknown, count: unknown): void {
  if (unitInterval(usefulness)) hit.usefulness = usefulness;
  if (typeof count === 'number' && Number.isSafeInteger(count) && count >= 0) hit.inclusions = count;
}

/** Over the content cap, sent without text (contract.md §4.3): `oversize`, not invalid. */
function isOversizeRow(item: unknown): boolean {
  return isRecord(item) && item.oversize === true && isRecord(item.memory) && item.memory.content === null;
}

const UNBOUNDED: HitLimits = { limit: Number.POSITIVE_INFINITY, maxChars: Number.POSITIVE_INFINITY };

/**
 * Keeps the request's org and agent among the first `limits.limit` items (contract.md §4.1). Size is
 * checked before scoping, so per-item work is bounded by the cap.
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

/** e.g. `dropped 1 invalid, 2 foreign; ignored 4980 past limit`, or "". */
export function droppedDetail(invalid: number, foreign: number, oversize = 0, ignored = 0): string {
  const parts: string[] = [];
  if (invalid > 0) parts.push(`${invalid} invalid`);
  if (foreign > 0) parts.push(`${foreign} foreign`);
  if (oversize > 0) parts.push(`${oversize} oversize`);
  const dropped = parts.length === 0 ? '' : `dropped ${parts.join(', ')}`;
  if (ignored === 0) return dropped;
  return dropped === '' ? `ignored ${ignored} past limit` : `${dropped}; ignored ${ignored} past limit`;
}

/** Body → validated hits; pure, so it also runs in the body-decoder thread. @throws BranchError. */
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

/** `{"data": {"results": [...]}}` (contract.md §4.1); @throws BranchError `bad shape: …`. */
export function unwrapMemoryResponse(body: unknown): RawHits {
  if (!isRecord(body)) throw BranchErrors.badShape('body is not an object');
  const data = body.data;
  if (!isRecord(data)) throw BranchErrors.badShape('data is not an object');
  const results = data.results;
  if (!Array.isArray(results)) throw BranchErrors.badShape('data.results is not an array');
  return results;
}
