/**
 * BATCH_COLUMNS is the one list of a batch's typed arrays: what a dispatch transfers and what the pool moves
 * into buffers of its own. A typed array added to CpuTaskInput but not to the list fails the build
 * (`EveryBatchColumnListed` in src/cpu-stage/cpu-batch.ts); the type-level checks below are compiled by
 * `npm run build`, which type-checks test/.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import { taskScalars } from '../../bench/lib/synthetic.js';
import {
  BATCH_COLUMNS,
  type BatchColumn,
  CANDIDATE_COLUMNS,
  type CpuTaskInput,
  type ListsEveryColumn,
  transferList,
} from '../../src/cpu-stage/cpu-batch.js';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import { takeOwnership } from '../../src/pool/pool-call.js';

/** A batch type with a column the list does not name. */
interface WithUnlistedColumn extends CpuTaskInput {
  salience: Float64Array;
}

function batch(): CpuTaskInput {
  const candidate = { memory_id: 'm-1', category: 'factual', content: 'text', score: 1, similarity: 1 };
  return encodeCandidates(
    [{ ...candidate, confidence: 1, rank: 1, tokens: 10 }],
    taskScalars({ budget: 100, dpCellCeiling: 1000 }),
  );
}

describe('BATCH_COLUMNS', () => {
  it('names every typed array of CpuTaskInput, at the type level', () => {
    expectTypeOf<ListsEveryColumn<CpuTaskInput, BatchColumn>>().toEqualTypeOf<true>();
    // A column added to the batch type but not to the list is named by the check...
    expectTypeOf<ListsEveryColumn<WithUnlistedColumn, BatchColumn>>().toEqualTypeOf<'salience'>();
    // ...and is a compile error where the check is asserted.
    // @ts-expect-error 'salience' is not in BATCH_COLUMNS
    const unlisted: ListsEveryColumn<WithUnlistedColumn, BatchColumn> = true;
    expect(unlisted).toBe(true);
  });

  it('names every typed array of an encoded batch, and nothing else', () => {
    const input = batch();
    const views = Object.keys(input).filter((k) => ArrayBuffer.isView(input[k as keyof CpuTaskInput]));
    expect(new Set(views)).toEqual(new Set(BATCH_COLUMNS));
    expect(BATCH_COLUMNS.slice(0, CANDIDATE_COLUMNS.length)).toEqual([...CANDIDATE_COLUMNS]);
    for (const name of CANDIDATE_COLUMNS) expect(input[name]).toHaveLength(1);
  });

  it('takeOwnership moves every column and detaches the caller views', () => {
    const input = batch();
    const before = Object.fromEntries(BATCH_COLUMNS.map((name) => [name, Array.from(input[name])]));
    expect(transferList(input)).toHaveLength(1);
    const owned = takeOwnership(input);
    for (const name of BATCH_COLUMNS) {
      expect(input[name].byteLength, name).toBe(0);
      expect(Array.from(owned[name]), name).toEqual(before[name]);
    }
  });
});
