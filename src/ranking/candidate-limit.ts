/**
 * How many cold candidates to ask the store for (contract.md §7 "Candidates sized to the budget"): enough to
 * fill the call's memory budget several times over, at the typical cost of a memory, bounded.
 */
import { SEARCH_LIMIT } from '../retrieval/validate.js';
import type { MemoryHit } from '../wire/types.js';

/** How many times over the candidates should be able to fill the budget. */
export const FILL_FACTOR = 3;
/**
 * Tokens of a memory block beyond its content: the open tag with a 22-letter nonce, a UUID and a
 * category, the close tag and the `\n` between blocks (~110 characters).
 */
export const WRAPPER_TOKENS = 30;
/** Typical content tokens of a memory until measured (a chat turn). */
const PRIOR_CONTENT_TOKENS = 30;
/** Weight of the newest call's mean in the running mean. */
const MEAN_WEIGHT = 0.05;

/**
 * Sizes cold searches to the budget. The typical memory cost is a running mean over this process's
 * candidates (content bytes / 4 + the wrapper), one per service, not per agent: agents of one deployment
 * write memories of similar kinds, and a per-agent table would grow with the tenants.
 */
export class CandidateLimit {
  #contentTokens = PRIOR_CONTENT_TOKENS;

  /** @param maxCandidates the store's bound (IBEX_CONTEXT_MAX_CANDIDATES). */
  constructor(readonly maxCandidates: number) {}

  /**
   * Cold hits to ask for: ceil(FILL_FACTOR × budget / typical cost), at least {@link SEARCH_LIMIT}, at most
   * `maxCandidates`.
   * @param budgetTokens the call's memory budget bound: `available_tokens` when set, else the model's
   *   context window (an upper bound of the usable budget, which the CPU stage computes).
   */
  limitFor(budgetTokens: number): number {
    const typical = this.#contentTokens + WRAPPER_TOKENS;
    const wanted = Math.ceil((FILL_FACTOR * Math.max(0, budgetTokens)) / typical);
    return Math.min(this.maxCandidates, Math.max(SEARCH_LIMIT, wanted));
  }

  /** Learns from one call's candidates (their content sizes). */
  observe(hits: readonly MemoryHit[]): void {
    if (hits.length === 0) return;
    let bytes = 0;
    for (const h of hits) bytes += h.content.length;
    const mean = bytes / hits.length / 4;
    this.#contentTokens += MEAN_WEIGHT * (mean - this.#contentTokens);
  }
}
