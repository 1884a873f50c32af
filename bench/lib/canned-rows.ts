/**
 * `memories_used` rows for the benches' canned AssembleContext answers (bench:driver, bench:frames): 30
 * rows the size of a LoCoMo answer's, fixed ids and scores.
 */
import type { MemoryUsed } from '../../src/server/proto.js';

/** What varies between the benches' rows. */
export interface CannedRowOptions {
  category: string;
  /** Rows before this index are `included`, the rest `budget`. */
  included: number;
  confidence: number;
  /** Token estimate of every row. */
  tokens: number;
}

/** 30 rows, ranks 1..30, scores 0.5. */
export function cannedRows(o: CannedRowOptions): MemoryUsed[] {
  return Array.from({ length: 30 }, (_, i) => ({
    memory_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    composite_score: 0.5,
    relevance_score: 0.5,
    recency_score: 0,
    usefulness_score: 0,
    rank: i + 1,
    category: o.category,
    exclusion: i < o.included ? 'included' : 'budget',
    similarity: 0.5,
    confidence: o.confidence,
    token_estimate: o.tokens,
  }));
}
