/**
 * The one index sort the packer's orders use: `canonicalOrder` (contract.md §8 step 1) and the
 * branch-and-bound's efficiency order both sort candidate indices by a strict "comes before" test.
 */

/**
 * Sorts `idx` (candidate indices into the caller's arrays) in place so that `before(a, b)` holds for
 * every earlier `a` and later `b`, and returns it. Up to `insertionMax` entries an insertion sort, which
 * for the usual few dozen candidates beats a comparator sort's call overhead; above it the typed array's
 * own sort. Both are stable, so indices that are not `before` each other keep their input order.
 */
export function sortIndices(
  idx: Int32Array,
  before: (a: number, b: number) => boolean,
  insertionMax: number,
): Int32Array {
  const n = idx.length;
  if (n > insertionMax) return idx.sort((a, b) => (before(a, b) ? -1 : before(b, a) ? 1 : 0));
  for (let i = 1; i < n; i++) {
    const x = idx[i]!;
    let j = i - 1;
    while (j >= 0 && before(x, idx[j]!)) {
      idx[j + 1] = idx[j]!;
      j--;
    }
    idx[j + 1] = x;
  }
  return idx;
}
