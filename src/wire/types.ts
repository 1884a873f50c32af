/** Shapes shared by retrieval, ranking, packing and formatting. */
import type { MemoryContent } from '../text/content-bytes.js';

/** After contract.md §4.1 validation. */
export interface MemoryHit {
  memory_id: string;
  org_id: string;
  agent_id: string;
  /** Untrusted; bytes when a retrieval thread encoded it, so the event loop never decodes it. */
  content: MemoryContent;
  category: string;
  confidence: number;
  similarity: number;
  rank: number;
  source: string;
  /** Epoch ms; absent when missing or unreadable. */
  created_at_ms?: number;
  usefulness?: number;
  inclusions?: number;
}

export interface ScoredCandidate extends MemoryHit {
  /** What the packer maximises: interim_v1 or composite_v1 (contract.md §7). */
  score: number;
  relevance?: number;
  recency?: number;
  usefulness?: number;
}

export type BranchName = 'directive' | 'hot' | 'cold';

export interface BranchOutcome {
  name: BranchName;
  status: 'success' | 'timeout' | 'error' | 'skipped';
  latency_ms: number;
  /** e.g. `hot_timeout`, `memory service HTTP 503`, `dropped 2 invalid`. */
  detail: string;
}

export interface Directive {
  content: string;
  injection_mode: 'system_first' | 'system_append' | 'user_prepend';
  version_id: string;
}

export interface ChatMessage {
  role: string;
  content: string;
}
