/** Code-point order (contract.md §8, §9); `<` on strings compares UTF-16 units, misordering astral characters. */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      const xs = x >= 0xd800 && x <= 0xdfff;
      const ys = y >= 0xd800 && y <= 0xdfff;
      // A surrogate starts a code point ≥ U+10000, above every BMP unit that is not a surrogate.
      if (xs !== ys && (x >= 0xe000 || y >= 0xe000)) return xs ? 1 : -1;
      return x - y;
    }
  }
  return a.length - b.length;
}
