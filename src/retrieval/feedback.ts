/**
 * Writes of the project's stores that ranking reads back (contract.md §7, §7a): the usefulness a caller's
 * feedback moves, and the inclusion counts behind the composite's frequency term. Both stores (embedded,
 * PostgreSQL) implement {@link FeedbackStore}; a memory service over HTTP has no such operation.
 */

/** RecordMemoryFeedback's `feedback` values (contract.md §7a). */
export const FEEDBACK_KINDS = ['helpful', 'not_helpful', 'harmful'] as const;

/** One of {@link FEEDBACK_KINDS}. */
export type FeedbackKind = (typeof FEEDBACK_KINDS)[number];

/**
 * The fixed step of contract.md §7a: `helpful` adds it to the usefulness, `not_helpful` and `harmful`
 * subtract it, clamped to [0, 1]. From the neutral 0.5, five helpful answers reach 1 and five unhelpful
 * ones 0: a memory's standing follows its last few answers, and no single one decides it.
 */
export const USEFULNESS_STEP = 0.1;

/** Usefulness of a memory nobody has given feedback on. */
export const NEUTRAL_USEFULNESS = 0.5;

/** The signed step of one feedback. */
export function usefulnessDelta(kind: FeedbackKind): number {
  return kind === 'helpful' ? USEFULNESS_STEP : -USEFULNESS_STEP;
}

/** One memory's usefulness before and after a feedback. */
export interface UsefulnessUpdate {
  memoryId: string;
  previous: number;
  current: number;
}

/** One memory's inclusions to add. */
export interface InclusionCount {
  orgId: string;
  memoryId: string;
  count: number;
}

/** Most rows one inclusion statement updates: its parameters stay small, and its lock short. */
export const INCLUSION_BATCH = 500;

/** The writes a store offers for feedback and frequency. */
export interface FeedbackStore {
  /**
   * Moves the usefulness of each of `memoryIds` that belongs to `orgId` by `usefulnessDelta(kind)`,
   * clamped to [0, 1], in one transaction. Ids of another org or unknown ids are left alone and not
   * reported.
   * @param orgId canonical lower-case UUID.
   * @param memoryIds canonical lower-case UUIDs, distinct.
   * @returns one update per memory of the org, in `memoryIds` order.
   */
  recordFeedback(
    orgId: string,
    memoryIds: readonly string[],
    kind: FeedbackKind,
  ): UsefulnessUpdate[] | Promise<UsefulnessUpdate[]>;
  /**
   * Adds inclusions, at most {@link INCLUSION_BATCH} rows, in one statement; a row whose memory is not of
   * its org (or no longer exists) changes nothing.
   * @returns rows updated.
   */
  addInclusions(rows: readonly InclusionCount[]): number | Promise<number>;
}

/**
 * The updates {@link FeedbackStore.recordFeedback} answers: one per id of `memoryIds` found in both maps
 * (the org's memories), in `memoryIds` order.
 * @param previous usefulness before the write, by memory id.
 * @param current usefulness after it, by memory id.
 */
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

/**
 * Checks one {@link FeedbackStore.addInclusions} batch.
 * @returns false for an empty batch (nothing to write).
 * @throws RangeError above {@link INCLUSION_BATCH} rows.
 */
export function inclusionBatch(rows: readonly InclusionCount[]): boolean {
  if (rows.length > INCLUSION_BATCH) throw new RangeError(`at most ${INCLUSION_BATCH} rows per batch`);
  return rows.length > 0;
}
