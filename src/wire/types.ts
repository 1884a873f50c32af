/**
 * Shapes shared by retrieval, ranking, packing and formatting. Pure types, no runtime code.
 */
import type { MemoryContent } from '../text/content-bytes.js';

/** A memory hit as the memory service (or the embedded store) returns it, after contract.md §4.1 validation. */
export interface MemoryHit {
  /** Canonical lower-case UUID. */
  memory_id: string;
  org_id: string;
  agent_id: string;
  /**
   * Untrusted text: a string, or its UTF-8 bytes when a retrieval thread (memory-body decoder, store
   * read) encoded it so that the event loop never decodes memory text (retrieval/content-bytes.ts).
   */
  content: MemoryContent;
  category: string;
  /** In [0,1]. */
  confidence: number;
  /** In [0,1]. */
  similarity: number;
  /** Integer ≥ 1, position in the source's own ranking. */
  rank: number;
  /** Which retrieval produced it (`hot`, `vector`, `fts`, …), as the source says. */
  source: string;
  /** `memory.created_at` as epoch ms; absent when the source sent none or an unreadable one. */
  created_at_ms?: number;
  /** `memory.usefulness`, the stored feedback score in [0, 1]; absent when the source sent none. */
  usefulness?: number;
  /** `memory.retrieval_count`, answers that included the memory; absent when the source sent none. */
  inclusions?: number;
}

/** A hit after dedupe and the interim score (contract.md §7). */
export interface ScoredCandidate extends MemoryHit {
  /**
   * The score the packer maximises: interim `0.85 × similarity + 0.15 × confidence` (score_schema
   * `interim_v1`) or the composite (`composite_v1`, ranking/composite.ts).
   */
  score: number;
  /** Query relevance in [0, 1] (`composite_v1` only: ranking/relevance.ts). */
  relevance?: number;
  /** Recency in [0, 1] (`composite_v1` only). */
  recency?: number;
  /** Usefulness in [0, 1] (`composite_v1` only). */
  usefulness?: number;
}

/** Name of one retrieval branch (contract.md §0). */
export type BranchName = 'directive' | 'hot' | 'cold';

/** Outcome of one branch (contract.md §2 BranchOutcome, §4). */
export interface BranchOutcome {
  name: BranchName;
  status: 'success' | 'timeout' | 'error' | 'skipped';
  /** Measured on the monotonic clock, ms. */
  latency_ms: number;
  /** e.g. `outer_deadline`, `hot_timeout`, `memory service HTTP 503`, `empty_query`, `dropped 2 invalid`. */
  detail: string;
}

/** Directive as stored (contract.md §4.2). */
export interface Directive {
  content: string;
  injection_mode: 'system_first' | 'system_append' | 'user_prepend';
  version_id: string;
}

/** One history message as it arrives in the request. */
export interface ChatMessage {
  role: string;
  content: string;
}
