/**
 * Row shapes of the embedded store (contract.md §4.1 item shape, §4.2 envelope) and the argument checks and
 * row mapping shared by its statements; the store itself is embedded-store.ts.
 */

import type { MemoryContent } from '../text/content-bytes.js';
import { canonicalUuid } from '../util/uuid.js';
import { Errors } from '../wire/errors.js';
import { agentScopePrefix, codePoints, scopeText } from './sqlite/store-schema.js';

/** A memory to write. */
export interface MemoryRow {
  /** UUID; stored lower-case. Upserting an existing id replaces that memory. */
  id: string;
  org_id: string;
  agent_id: string;
  content: string;
  /** e.g. `episodic`, `factual`. */
  category: string;
  /** In [0,1]. */
  confidence: number;
  /** Epoch milliseconds; hot reads are newest first. */
  created_at: number;
}

/** A directive to write; the fields of the contract.md §4.2 envelope. */
export interface DirectiveRow {
  org_id: string;
  agent_id: string;
  /** `null` is stored and read back as "" (contract.md §4.2). */
  content: string | null;
  injection_mode: string;
  version_id: string;
}

/**
 * A hit in the memory-wire item shape (contract.md §4.1), before validation. `C` is the content's type: text
 * from the store itself, {@link MemoryContent} (text or UTF-8 bytes) from a store-read thread.
 */
export interface StoreHit<C extends MemoryContent = string> {
  memory: {
    id: string;
    org_id: string;
    agent_id: string;
    /**
     * `null` when the memory is longer than the cap (then `oversize` is set); UTF-8 bytes when it comes
     * from a store-read thread (content-bytes.ts).
     */
    content: C | null;
    category: string;
    confidence: number;
    /** ISO-8601 UTC. */
    created_at: string;
    /** Feedback score in [0, 1] (contract.md §7a); the project's stores always send it. */
    usefulness?: number;
    /** Answers that included the memory (the composite's frequency input). */
    retrieval_count?: number;
  };
  similarity: number;
  /** 1-based position in this answer. */
  rank: number;
  source: 'hot' | 'fts';
  /** Set when the content exceeds `maxMemoryChars`: the hit is to be dropped as `oversize`. */
  oversize?: true;
}

/** A stored directive as the contract.md §4.2 envelope object, for `parseDirectiveObject`. */
export interface DirectiveEnvelope {
  v: 1;
  content: string | null;
  injection_mode: string;
  version_id: string;
}

/** Read options. `orgId: null` reads every org's rows for the agent (memory-server only). */
export interface ReadOptions {
  limit?: number;
  /** Minimum confidence, in [0,1]; default 0. */
  minConfidence?: number;
  /** Longest content returned, code points; default the store's `maxMemoryChars`. */
  maxChars?: number;
  /**
   * Search only: read the dialogue neighbours of this many best hits (retrieval/neighbours.ts); default 0,
   * the plain text search.
   */
  neighbours?: number;
}

/** Open options. */
export interface OpenOptions {
  /** How long a write waits for another writer's lock, ms (better-sqlite3 `timeout`). Default 2000. */
  busyTimeoutMs?: number;
  /** Default content cap of reads, code points (`IBEX_CONTEXT_MAX_MEMORY_CHARS`). Default 65536. */
  maxMemoryChars?: number;
  /** Cache hot reads and directives until a write (default true; the bench turns it off to compare). */
  cache?: boolean;
}

/** Default of {@link OpenOptions.maxMemoryChars} (contract.md §3 `IBEX_CONTEXT_MAX_MEMORY_CHARS`). */
export const DEFAULT_MAX_MEMORY_CHARS = 65_536;

/**
 * A memory as a read returns it: a {@link MemoryRow} whose content is `null` when over the read's cap,
 * with its feedback score and inclusion count when the statement selected them.
 */
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

/** The FTS5 scope term to match: org+agent token, or the agent's prefix (memory wire). See {@link scopeText}. */
export function scopeToken(orgId: string | null, agentId: string): string {
  return orgId === null ? `"${agentScopePrefix(agentId)}"*` : `"${scopeText(orgId, agentId)}"`;
}

/** Maps FTS5 bm25 (≤ 0, lower is better) into [0,1): s = x/(1+x), x = −bm25. */
export function bm25ToSimilarity(bm25: number): number {
  const x = -bm25;
  if (!Number.isFinite(x) || x <= 0) return 0;
  return x / (1 + x);
}

/**
 * A row as the memory-wire hit shape (contract.md §4.1); `created_at` as epoch ms (SQLite) or a Date (PostgreSQL).
 * A `null` content (over the size cap) is marked `oversize`.
 */
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
  // Assigned, not spread: V8 11 adds each property after a spread through its runtime (~1 µs), and a
  // search materialises hundreds of rows.
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

/** Hits are shared through the read cache: freezing makes a caller's mutation an error, not a leak. */
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
  // ±8.64e15 ms is the Date range; beyond it the ISO rendering of a hit would throw.
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

/**
 * Checks the rows of a replaceAgent: every row valid ({@link checkMemory}) and of the one org+agent.
 * @returns the canonical org and agent ids and the checked rows.
 * @throws IbexError INVALID_ARGUMENT for a bad id, confidence or created_at, or a row of another org/agent.
 */
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
