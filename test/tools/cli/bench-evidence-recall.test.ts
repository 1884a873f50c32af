import { describe, expect, it } from 'vitest';
import * as recall from '../../../bench/lib/evidence-recall.js';

describe('evidence recall (bench:quality)', () => {
  it('counts evidence turns found and items with all their evidence', () => {
    const t = recall.emptyTally();
    recall.addItem(t, ['a', 'b'], new Set(['a', 'x']));
    recall.addItem(t, ['c'], new Set(['c']));
    recall.addItem(t, [], new Set(['c']));
    expect(t).toEqual({ items: 2, evidenceTurns: 3, found: 2, allFound: 1 });
    expect(recall.recallFigures(t)).toEqual({
      items: 2,
      evidence_turns: 3,
      evidence_recall_pct: 66.7,
      all_evidence_pct: 50,
    });
    expect(recall.recallFigures(recall.emptyTally()).evidence_recall_pct).toBeNull();
  });

  it('first-fit skips what does not fit and goes on; trimming stops at the first', () => {
    const cost = (id: string) => ({ a: 5, b: 10, c: 3 })[id]!;
    expect([...recall.firstFit(['a', 'b', 'c'], cost, 9)]).toEqual(['a', 'c']);
    expect([...recall.trimToBudget(['a', 'b', 'c'], cost, 9)]).toEqual(['a']);
    expect([...recall.firstFit(['a', 'b', 'c'], cost, Number.POSITIVE_INFINITY)]).toEqual(['a', 'b', 'c']);
  });
});
