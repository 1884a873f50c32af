/**
 * `memories_used` rows for the benches' canned AssembleContext answers (bench:driver, bench:frames,
 * bench:floor): 30 rows the size of a LoCoMo answer's, fixed ids and scores; and the canned answer itself.
 */
import type { AssembleContextResponse, MemoryUsed } from '../../src/wire/proto.js';

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

/**
 * The canned answer of bench:driver and bench:floor: a LoCoMo-sized context (12,000 characters) and 30
 * rows, 6 of them excluded for budget; 14,720 bytes encoded.
 */
export function cannedAnswer(): AssembleContextResponse {
  const rows = cannedRows({ category: 'fact', included: 24, confidence: 1, tokens: 110 });
  return {
    assembled_context: 'x'.repeat(12_000),
    tokens_used: 3000,
    memories_included: 24,
    memories_used: rows,
    memory_tokens: 2640,
    score_schema: 'interim_v1',
    degradation: { level: 'L0', intentional: false, reasons: [], branches: [] },
  } as unknown as AssembleContextResponse;
}
