/** How long before its deadline the DP must stop for greedy + format + return to land (contract.md §10). */

/** Ms kept beyond formatting: greedy, decoding, the return message. */
const FIXED_RESERVE_MS = 1;
/** Units per escaped character (one per plain byte): markup density, not size, decides the cost. See docs/design/packing.md. */
const ESCAPE_UNITS = 128;
const DEFAULT_FORMAT_NS_PER_UNIT = 2.5;
const CALIBRATE_MIN_UNITS = 64 * 1024;
let formatNsPerUnit = DEFAULT_FORMAT_NS_PER_UNIT;

/** Units per escaped character (one per plain byte): markup density, not size, decides the cost. */
const SAMPLE_BYTES = 256;
const ESCAPED = new Uint8Array(256);
ESCAPED[0x26] = ESCAPED[0x3c] = ESCAPED[0x3e] = 1;

/** Estimated formatter units of [from, to), counted on a prefix so it stays cheap. */
export function formatUnits(bytes: Uint8Array, from: number, to: number): number {
  const length = to - from;
  const end = Math.min(to, from + SAMPLE_BYTES);
  let escapes = 0;
  for (let k = from; k < end; k++) escapes += ESCAPED[bytes[k]!]!;
  return length + (ESCAPE_UNITS * escapes * length) / Math.max(1, end - from);
}

/**
 * Ms before the deadline at which the DP must stop: the fixed reserve plus the formatter's estimate as if
 * every candidate were selected (the selection is not known before packing).
 */
export function deadlineReserveMs(units: number): number {
  return FIXED_RESERVE_MS + (units * formatNsPerUnit) / 1e6;
}

/** EWMA of this thread's ns per unit, from tasks large enough not to be noise. */
export function calibrateFormatCost(units: number, ms: number): void {
  if (units < CALIBRATE_MIN_UNITS) return;
  formatNsPerUnit = 0.8 * formatNsPerUnit + 0.2 * ((ms * 1e6) / units);
}
