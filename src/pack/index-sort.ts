/**
 * Sorts candidate indices in place by a strict `before` test, stably; insertion sort up to `insertionMax`
 * (cheaper for a few dozen candidates than a comparator sort's calls).
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
