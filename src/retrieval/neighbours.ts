/** Dialogue neighbours of a cold search (contract.md §4.3; docs/scoring.md "Dialogue neighbours"). */
import { MAX_NEIGHBOUR_HITS } from '../config/ranking-settings.js';
import { compareCodePoints } from '../text/code-point-order.js';
import type { MemoryContent } from '../text/content-bytes.js';
import { Errors } from '../wire/errors.js';

export { DEFAULT_NEIGHBOUR_HITS, MAX_NEIGHBOUR_HITS } from '../config/ranking-settings.js';
/** Share of its hit's score the next memory gets when the hit asks a question; else NEXT_DISCOUNT. */
export const ANSWER_DISCOUNT = 0.95;
export const NEXT_DISCOUNT = 0.6;
/** Share the previous memory gets. */
export const PREVIOUS_DISCOUNT = 0.6;

const QUESTION_RE = /[?\uff1f]/;

/** Whether the text (or its UTF-8 bytes) holds `?` or the full-width `？` (U+FF1F: EF BC 9F). */
export function asksQuestion(content: MemoryContent | null): boolean {
  if (content === null) return false;
  if (typeof content === 'string') return QUESTION_RE.test(content);
  for (let i = 0; i < content.length; i++) {
    const b = content[i];
    if (b === 0x3f || (b === 0xef && content[i + 1] === 0xbc && content[i + 2] === 0x9f)) return true;
  }
  return false;
}

export interface ScoredRow<R extends { id: string }> {
  row: R;
  x: number;
}

export interface NeighbourRow<R extends { id: string }> {
  row: R;
  parent: number;
  next: boolean;
}

/** Merges neighbours at a share of their hit's x (a memory keeps its higher x); cut to `limit`. */
export function mergeNeighbours<R extends { id: string; content: MemoryContent | null }>(
  hits: readonly ScoredRow<R>[],
  neighbours: readonly NeighbourRow<R>[],
  limit: number,
): ScoredRow<R>[] {
  if (neighbours.length === 0) return hits.slice(0, limit);
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
  // Hits keep their order; raised hits and neighbours are sorted apart and merged, no full sort.
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

/** The stores' own order of hits. */
function byScore<R extends { id: string }>(a: ScoredRow<R>, b: ScoredRow<R>): number {
  return b.x - a.x || compareCodePoints(a.row.id, b.row.id);
}

/** An integer in [0, {@link MAX_NEIGHBOUR_HITS}], default 0; else INVALID_ARGUMENT. */
export function neighbourArg(n: number | undefined): number {
  if (n === undefined) return 0;
  if (!Number.isSafeInteger(n) || n < 0 || n > MAX_NEIGHBOUR_HITS) {
    throw Errors.invalidArgument('neighbours', `neighbours must be an integer in [0, ${MAX_NEIGHBOUR_HITS}]`);
  }
  return n;
}
