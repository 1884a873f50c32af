/** Store writes that ranking reads back (contract.md §7, §7a); a memory service over HTTP has none. */

/** contract.md §7a. */
export const FEEDBACK_KINDS = ['helpful', 'not_helpful', 'harmful'] as const;

export type FeedbackKind = (typeof FEEDBACK_KINDS)[number];

/** contract.md §7a step: from 0.5, five like answers reach 1 or 0, so no single one decides. */
export const USEFULNESS_STEP = 0.1;

export const NEUTRAL_USEFULNESS = 0.5;

export function usefulnessDelta(kind: FeedbackKind): number {
  return kind === 'helpful' ? USEFULNESS_STEP : -USEFULNESS_STEP;
}

export interface UsefulnessUpdate {
  memoryId: string;
  previous: number;
  current: number;
}

export interface InclusionCount {
  orgId: string;
  memoryId: string;
  count: number;
}

/** Keeps an inclusion statement's parameters small and its lock short. */
export const INCLUSION_BATCH = 500;

export interface FeedbackStore {
  /** Moves the org's `memoryIds` by `usefulnessDelta(kind)`, clamped, in one transaction; others skipped. */
  recordFeedback(
    orgId: string,
    memoryIds: readonly string[],
    kind: FeedbackKind,
  ): UsefulnessUpdate[] | Promise<UsefulnessUpdate[]>;
  /** At most {@link INCLUSION_BATCH} rows, one statement; rows of a foreign or gone memory are no-ops. */
  addInclusions(rows: readonly InclusionCount[]): number | Promise<number>;
}

/** Updates for ids found in both maps, in `memoryIds` order. */
export function feedbackUpdates(
  memoryIds: readonly string[],
  previous: ReadonlyMap<string, number>,
  current: ReadonlyMap<string, number>,
): UsefulnessUpdate[] {
  const updates: UsefulnessUpdate[] = [];
  for (const id of memoryIds) {
    const p = previous.get(id);
    const c = current.get(id);
    if (p !== undefined && c !== undefined) updates.push({ memoryId: id, previous: p, current: c });
  }
  return updates;
}

/** @returns false for an empty batch; @throws RangeError above {@link INCLUSION_BATCH} rows. */
export function inclusionBatch(rows: readonly InclusionCount[]): boolean {
  if (rows.length > INCLUSION_BATCH) throw new RangeError(`at most ${INCLUSION_BATCH} rows per batch`);
  return rows.length > 0;
}
