/**
 * Dialogue neighbours of a cold search (contract.md §4.3, docs/scoring.md "Dialogue neighbours"): the
 * memory written just after, and the one just before, each of the best few search hits, added as
 * candidates with a share of that hit's search score.
 *
 * Why: a conversation's answer is often in the turn after the one that shares the question's words
 * ("How long have you been married?" → "5 years already!"), and the question is often in the turn
 * before the answer. Neither shares a term with the query, so no lexical score finds it, but its
 * neighbour does. On LoCoMo this raised evidence recall by 4.2–4.7 points at memory budgets of 500 to
 * 4,000 tokens (docs/quality.md).
 *
 * A neighbour is the agent's memory of the same category with the next (or previous) `created_at`,
 * read with the search's own scope (org and agent) and filters: it can never widen visibility. Its x (the
 * store's text-search score, before the x/(1+x) map) is a share of its hit's: 0.95 for the memory after
 * a hit that asks a question, whose answer it likely is, 0.6 otherwise; a memory that is also a hit keeps
 * the higher x. The merged list is ordered and cut to the search's limit like the search itself, so the
 * relevance of composite_v1 (x / x_best, ranking/relevance.ts) values a neighbour at the share times its
 * hit's relevance.
 */
import { MAX_NEIGHBOUR_HITS } from '../config/ranking-settings.js';
import { compareCodePoints } from '../text/code-point-order.js';
import { Errors } from '../wire/errors.js';

export { DEFAULT_NEIGHBOUR_HITS, MAX_NEIGHBOUR_HITS } from '../config/ranking-settings.js';
/** Share of its hit's score the next memory gets when the hit asks a question (the likely answer). */
export const ANSWER_DISCOUNT = 0.95;
/** Share of its hit's score the next memory gets otherwise (the reply to a matching turn). */
export const NEXT_DISCOUNT = 0.6;
/** Share of its hit's score the previous memory gets (what a matching turn replies to). */
export const PREVIOUS_DISCOUNT = 0.6;

/** A question mark, ASCII or full-width (the CJK scripts' own). */
const QUESTION_RE = /[?\uff1f]/;

/** The memory asks something: its content holds a question mark (an oversize row's `null` does not). */
export function asksQuestion(content: string | null): boolean {
  return content !== null && QUESTION_RE.test(content);
}

/** A row with its text-search score x ≥ 0 (higher is better). */
export interface ScoredRow<R extends { id: string }> {
  row: R;
  x: number;
}

/** A neighbour read for the hit `parent` (an index into the hits), after it (`next`) or before. */
export interface NeighbourRow<R extends { id: string }> {
  row: R;
  parent: number;
  next: boolean;
}

/**
 * Merges neighbours into the search hits: a neighbour gets a share of its hit's x ({@link ANSWER_DISCOUNT}
 * for the memory after a hit that asks a question, else {@link NEXT_DISCOUNT} or {@link PREVIOUS_DISCOUNT}),
 * a memory already among
 * the hits keeps the higher of the two; ordered by x descending then id (the stores' own order), cut to
 * `limit`.
 * @param hits the search's hits, best first.
 * @param neighbours rows read next to `hits[parent]`.
 */
export function mergeNeighbours<R extends { id: string; content: string | null }>(
  hits: readonly ScoredRow<R>[],
  neighbours: readonly NeighbourRow<R>[],
  limit: number,
): ScoredRow<R>[] {
  if (neighbours.length === 0) return hits.slice(0, limit);
  // The best share each neighbour gets (a memory can be next to two hits).
  const shared = new Map<string, ScoredRow<R>>();
  for (const n of neighbours) {
    const parent = hits[n.parent];
    if (parent === undefined) continue;
    const share = n.next
      ? asksQuestion(parent.row.content)
        ? ANSWER_DISCOUNT
        : NEXT_DISCOUNT
      : PREVIOUS_DISCOUNT;
    const x = share * parent.x;
    const had = shared.get(n.row.id);
    if (had === undefined || x > had.x) shared.set(n.row.id, { row: n.row, x });
  }
  // Hits stay in their order; a hit raised by its share moves into `extra` (sorted, at most 2 per
  // parent), and the two sorted lists are merged: no sort of the whole list.
  const raised = new Set<number>();
  const extra: ScoredRow<R>[] = [];
  const at = new Map<string, number>();
  for (let i = 0; i < hits.length; i++) at.set(hits[i]!.row.id, i);
  for (const [id, n] of shared) {
    const i = at.get(id);
    if (i === undefined) extra.push(n);
    else if (n.x > hits[i]!.x) {
      raised.add(i);
      extra.push({ row: hits[i]!.row, x: n.x });
    }
  }
  extra.sort(byScore);
  const out: ScoredRow<R>[] = [];
  let h = 0;
  let e = 0;
  while (out.length < limit) {
    while (h < hits.length && raised.has(h)) h++;
    const hit = hits[h];
    const more = extra[e];
    if (hit === undefined && more === undefined) break;
    if (more === undefined || (hit !== undefined && byScore(hit, more) <= 0)) {
      out.push(hit!);
      h++;
    } else {
      out.push(more);
      e++;
    }
  }
  return out;
}

/** x descending, then id ascending by code point: the stores' own order of hits. */
function byScore<R extends { id: string }>(a: ScoredRow<R>, b: ScoredRow<R>): number {
  return b.x - a.x || compareCodePoints(a.row.id, b.row.id);
}

/**
 * A read's `neighbours` option checked: an integer in [0, {@link MAX_NEIGHBOUR_HITS}], default 0.
 * @throws IbexError INVALID_ARGUMENT otherwise.
 */
export function neighbourArg(n: number | undefined): number {
  if (n === undefined) return 0;
  if (!Number.isSafeInteger(n) || n < 0 || n > MAX_NEIGHBOUR_HITS) {
    throw Errors.invalidArgument('neighbours', `neighbours must be an integer in [0, ${MAX_NEIGHBOUR_HITS}]`);
  }
  return n;
}
