/**
 * How many cold candidates to ask the store for, and the relevance floor they are held to
 * (contract.md §7 "Candidates sized to the budget"): enough candidates to fill the call's memory budget
 * several times over, at the typical cost of a memory, bounded; the configured floor while the budget
 * can hold only a share of them, falling as the budget grows past the bound.
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
/**
 * Share of the configured floor a budget that holds every candidate is held to (0.15 → 0.05). The floor
 * keeps unrelated memories out of a budget that can hold only the best; one with room for all of them
 * still wants the weak matches, where most of an unlimited budget's missing evidence is
 * (docs/scoring.md, "Candidate bound and floor").
 */
export const ROOMY_FLOOR_SHARE = 1 / 3;
/** Typical content tokens of a memory until measured (a chat turn). */
const PRIOR_CONTENT_TOKENS = 30;
/** Weight of the newest call's mean in the running mean. */
const MEAN_WEIGHT = 0.05;

/** What one call asks the store for and holds its candidates to. */
export interface CandidatePlan {
  /** Cold hits to ask for, candidates, in [{@link SEARCH_LIMIT}, maxCandidates]. */
  limit: number;
  /** Relevance floor (relevance = x / x_best), in [configured × {@link ROOMY_FLOOR_SHARE}, configured]. */
  floor: number;
}

/**
 * Sizes cold searches and the floor to the budget. The typical memory cost is a running mean over this
 * process's candidates (content bytes / 4 + the wrapper), one per service, not per agent: agents of one
 * deployment write memories of similar kinds, and a per-agent table would grow with the tenants.
 */
export class CandidateLimit {
  #contentTokens = PRIOR_CONTENT_TOKENS;

  /**
   * @param maxCandidates the store's bound, candidates (IBEX_CONTEXT_MAX_CANDIDATES, ≥ {@link SEARCH_LIMIT}).
   * @param relevanceFloor the configured floor (IBEX_CONTEXT_RELEVANCE_FLOOR, [0, 0.5)): what a budget
   *   that holds at most 1 / {@link FILL_FACTOR} of its candidates is held to.
   */
  constructor(
    readonly maxCandidates: number,
    readonly relevanceFloor = 0,
  ) {}

  /**
   * Cold hits to ask for: ceil(FILL_FACTOR × budget / typical cost), at least {@link SEARCH_LIMIT}, at most
   * `maxCandidates`. Non-decreasing in the budget.
   * @param budgetTokens the call's memory budget bound, tokens: `available_tokens` when set, else the
   *   model's context window (an upper bound of the usable budget, which the CPU stage computes).
   */
  limitFor(budgetTokens: number): number {
    const wanted = Math.ceil((FILL_FACTOR * Math.max(0, budgetTokens)) / this.#typical());
    return Math.min(this.maxCandidates, Math.max(SEARCH_LIMIT, wanted));
  }

  /**
   * The call's limit ({@link limitFor}) and floor. Room = budget / typical cost, memories the budget holds.
   * While the limit fills the budget FILL_FACTOR times over (room ≤ limit / FILL_FACTOR) the floor is the
   * configured one: the budget takes the best third and the floor keeps unrelated memories out of it. Past
   * the bound the floor falls linearly in room / limit, to configured × {@link ROOMY_FLOOR_SHARE} once the
   * budget holds every candidate (room ≥ limit). Both are monotone in the budget: the limit
   * non-decreasing, the floor non-increasing.
   * @param budgetTokens as for {@link limitFor}, tokens.
   */
  planFor(budgetTokens: number): CandidatePlan {
    const limit = this.limitFor(budgetTokens);
    // Below the bound the limit fills the budget FILL_FACTOR times over or more (room / limit ≤ 1 / 3).
    if (limit < this.maxCandidates) return { limit, floor: this.relevanceFloor };
    const low = 1 / FILL_FACTOR;
    const t = Math.min(1, Math.max(0, (this.#room(budgetTokens) / limit - low) / (1 - low)));
    return { limit, floor: this.relevanceFloor * (1 - t * (1 - ROOMY_FLOOR_SHARE)) };
  }

  /** Learns from one call's candidates (their content sizes). */
  observe(hits: readonly MemoryHit[]): void {
    if (hits.length === 0) return;
    let bytes = 0;
    for (const h of hits) bytes += h.content.length;
    const mean = bytes / hits.length / 4;
    this.#contentTokens += MEAN_WEIGHT * (mean - this.#contentTokens);
  }

  /** Typical tokens of a memory block, content and wrapper. */
  #typical(): number {
    return this.#contentTokens + WRAPPER_TOKENS;
  }

  /** Memories of typical cost the budget holds (fractional, ≥ 0). */
  #room(budgetTokens: number): number {
    return Math.max(0, budgetTokens) / this.#typical();
  }
}
