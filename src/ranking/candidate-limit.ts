/** Cold-search limit and relevance floor sized to the call's budget (contract.md §7; docs/scoring.md). */
import { SEARCH_LIMIT } from '../retrieval/validate.js';
import type { MemoryHit } from '../wire/types.js';

export const FILL_FACTOR = 3;
/** Tokens of a block beyond its content (tags, nonce, UUID, category, separator). */
export const WRAPPER_TOKENS = 30;
/**
 * Share of the floor a budget holding every candidate keeps: 1 %. There the weak matches hold the missing
 * evidence, and how weak a match looks depends on the store's idf (docs/scoring.md, "BM25 on PostgreSQL");
 * a memory that shares no word with the query (relevance 0) still stays out.
 */
export const ROOMY_FLOOR_SHARE = 0.01;
const PRIOR_CONTENT_TOKENS = 30;
const MEAN_WEIGHT = 0.05;

export interface CandidatePlan {
  limit: number;
  floor: number;
}

/** Typical memory cost is a running mean per process, not per agent, so it does not grow with tenants. */
export class CandidateLimit {
  #contentTokens = PRIOR_CONTENT_TOKENS;

  constructor(
    readonly maxCandidates: number,
    readonly relevanceFloor = 0,
  ) {}

  /** ceil(FILL_FACTOR × budget / typical cost), bounded; `budgetTokens` = available_tokens, else the window. */
  limitFor(budgetTokens: number): number {
    const wanted = Math.ceil((FILL_FACTOR * Math.max(0, budgetTokens)) / this.#typical());
    return Math.min(this.maxCandidates, Math.max(SEARCH_LIMIT, wanted));
  }

  /** Limit and floor; the floor falls linearly once the bound cuts the limit (docs/scoring.md). */
  planFor(budgetTokens: number): CandidatePlan {
    const limit = this.limitFor(budgetTokens);
    if (limit < this.maxCandidates) return { limit, floor: this.relevanceFloor };
    const low = 1 / FILL_FACTOR;
    const t = Math.min(1, Math.max(0, (this.#room(budgetTokens) / limit - low) / (1 - low)));
    return { limit, floor: this.relevanceFloor * (1 - t * (1 - ROOMY_FLOOR_SHARE)) };
  }

  observe(hits: readonly MemoryHit[]): void {
    if (hits.length === 0) return;
    let bytes = 0;
    for (const h of hits) bytes += h.content.length;
    const mean = bytes / hits.length / 4;
    this.#contentTokens += MEAN_WEIGHT * (mean - this.#contentTokens);
  }

  #typical(): number {
    return this.#contentTokens + WRAPPER_TOKENS;
  }

  #room(budgetTokens: number): number {
    return Math.max(0, budgetTokens) / this.#typical();
  }
}
