/** Embedded-store row shapes (contract.md §4.1, §4.2) and the argument checks shared by its statements. */

import type { MemoryContent } from '../text/content-bytes.js';
import { canonicalUuid } from '../util/uuid.js';
import { Errors } from '../wire/errors.js';
import { agentScopePrefix, codePoints, scopeText } from './sqlite/store-schema.js';

export interface MemoryRow {
  /** UUID, stored lower-case; an existing id is replaced. */
  id: string;
  org_id: string;
  agent_id: string;
  content: string;
  category: string;
  confidence: number;
  /** Epoch ms. */
  created_at: number;
}

/** A directive to write (contract.md §4.2 envelope fields). */
export interface DirectiveRow {
  org_id: string;
  agent_id: string;
  /** `null` reads back as "". */
  content: string | null;
  injection_mode: string;
  version_id: string;
}

/** A hit in the memory-wire item shape (contract.md §4.1), before validation; `C`: text or UTF-8 bytes. */
export interface StoreHit<C extends MemoryContent = string> {
  memory: {
    id: string;
    org_id: string;
    agent_id: string;
    /** `null` over the cap (then `oversize` is set). */
    content: C | null;
    category: string;
    confidence: number;
    created_at: string;
    usefulness?: number;
    retrieval_count?: number;
  };
  similarity: number;
  rank: number;
  source: 'hot' | 'fts';
  oversize?: true;
}

export interface DirectiveEnvelope {
  v: 1;
  content: string | null;
  injection_mode: string;
  version_id: string;
}

/** `orgId: null` reads every org's rows for the agent (memory-server only). */
export interface ReadOptions {
  limit?: number;
  minConfidence?: number;
  /** Code points; default the store's `maxMemoryChars`. */
  maxChars?: number;
  /** Search only: dialogue neighbours of this many best hits (neighbours.ts); default 0. */
  neighbours?: number;
}

export interface OpenOptions {
  /** Lock wait of a write, ms (better-sqlite3 `timeout`). Default 2000. */
  busyTimeoutMs?: number;
  maxMemoryChars?: number;
  cache?: boolean;
}

export const DEFAULT_MAX_MEMORY_CHARS = 65_536;

/** Content `null` over the cap; usefulness and inclusions when selected. */
export type MemoryDbRow = Omit<MemoryRow, 'content'> & {
  content: string | null;
  usefulness?: number;
  inclusions?: number;
};

export function uuidArg(field: string, value: string): string {
  const id = canonicalUuid(value);
  if (id === null) throw Errors.invalidArgument(field, `${field} must be a UUID`);
  return id;
}

export function limitArg(limit: number | undefined, fallback: number): number {
  if (limit === undefined) return fallback;
  if (!Number.isSafeInteger(limit) || limit < 1)
    throw Errors.invalidArgument('limit', 'limit must be an integer ≥ 1');
  return limit;
}

export function minConfidenceArg(value: number | undefined): number {
  if (value === undefined) return 0;
  if (!Number.isFinite(value) || value < 0 || value > 1) {
    throw Errors.invalidArgument('min_confidence', 'min_confidence must be in [0,1]');
  }
  return value;
}

export function maxCharsArg(value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) throw Errors.invalidArgument('max_chars', 'must be ≥ 1');
  return value;
}

/** Org+agent token, or the agent's prefix (memory wire). */
export function scopeToken(orgId: string | null, agentId: string): string {
  return orgId === null ? `"${agentScopePrefix(agentId)}"*` : `"${scopeText(orgId, agentId)}"`;
}

/**
 * BM25's term saturation and length normalisation (FTS5's defaults), with which both stores rank a search
 * over the agent's own rows (docs/scoring.md).
 */
export const BM25_K1 = 1.2;
export const BM25_B = 0.75;

/** A search score in FTS5's sign (−x, ≤ 0, lower is better) into [0,1): x/(1+x). */
export function bm25ToSimilarity(bm25: number): number {
  const x = -bm25;
  if (!Number.isFinite(x) || x <= 0) return 0;
  return x / (1 + x);
}

/** A row as a memory-wire hit; `created_at` epoch ms or Date; `null` content → `oversize`. */
export function toHit(
  row: Omit<MemoryDbRow, 'created_at'> & { created_at: number | Date },
  similarity: number,
  rank: number,
  source: StoreHit['source'],
): StoreHit {
  const memory: StoreHit['memory'] = {
    id: row.id,
    org_id: row.org_id,
    agent_id: row.agent_id,
    content: row.content,
    category: row.category,
    confidence: row.confidence,
    created_at: new Date(row.created_at).toISOString(),
  };
  // Assigned, not spread: V8 adds properties after a spread through its runtime, per row.
  if (row.usefulness !== undefined) memory.usefulness = row.usefulness;
  if (row.inclusions !== undefined) memory.retrieval_count = Number(row.inclusions);
  const hit: StoreHit = { memory, similarity, rank, source };
  if (row.content === null) hit.oversize = true;
  return hit;
}

export function dbRow(
  row: MemoryDbRow & { content: string },
): MemoryDbRow & { scope: string; chars: number } {
  return {
    id: row.id,
    org_id: row.org_id,
    agent_id: row.agent_id,
    content: row.content,
    category: row.category,
    confidence: row.confidence,
    created_at: row.created_at,
    scope: scopeText(row.org_id, row.agent_id),
    chars: codePoints(row.content),
  };
}

/** Hits are shared through the read cache: freezing turns a caller's mutation into an error. */
export function freezeHits<C extends MemoryContent>(hits: StoreHit<C>[]): readonly StoreHit<C>[] {
  for (const hit of hits) {
    Object.freeze(hit.memory);
    Object.freeze(hit);
  }
  return Object.freeze(hits);
}

export function checkMemory(row: MemoryRow): MemoryDbRow & { content: string } {
  if (typeof row.content !== 'string' || typeof row.category !== 'string') {
    throw Errors.invalidArgument('content', 'content and category must be strings');
  }
  if (!Number.isFinite(row.confidence) || row.confidence < 0 || row.confidence > 1) {
    throw Errors.invalidArgument('confidence', 'confidence must be in [0,1]');
  }
  // Beyond ±8.64e15 ms (the Date range) the ISO rendering of a hit would throw.
  if (!Number.isFinite(row.created_at) || Math.abs(row.created_at) > 8.64e15) {
    throw Errors.invalidArgument('created_at', 'created_at must be epoch ms');
  }
  return {
    id: uuidArg('id', row.id),
    org_id: uuidArg('org_id', row.org_id),
    agent_id: uuidArg('agent_id', row.agent_id),
    content: row.content,
    category: row.category,
    confidence: row.confidence,
    created_at: Math.trunc(row.created_at),
  };
}

export function checkDirective(d: DirectiveRow): DirectiveRow {
  return {
    org_id: uuidArg('org_id', d.org_id),
    agent_id: uuidArg('agent_id', d.agent_id),
    content: d.content,
    injection_mode: d.injection_mode,
    version_id: d.version_id,
  };
}

/** @throws IbexError INVALID_ARGUMENT for a bad row or one of another org/agent. */
export function checkAgentRows(
  orgId: string,
  agentId: string,
  rows: readonly MemoryRow[],
): { org: string; agent: string; clean: (MemoryDbRow & { content: string })[] } {
  const org = uuidArg('org_id', orgId);
  const agent = uuidArg('agent_id', agentId);
  const clean = rows.map(checkMemory);
  for (const row of clean) {
    if (row.org_id !== org || row.agent_id !== agent) {
      throw Errors.invalidArgument('agent_id', `memory ${row.id} is not of org ${org} agent ${agent}`);
    }
  }
  return { org, agent, clean };
}
