/**
 * The CPU stage's formatter cost model (contract.md §10): how long before its deadline the DP must give up so that
 * greedy + format + return still land by it. Calibrated from real tasks on the thread that runs them.
 */

/**
 * Time the worker keeps, beyond formatting, once the DP stops (ms): greedy, decoding, the return message
 * and the calling thread getting round to it.
 */
const FIXED_RESERVE_MS = 1;
/**
 * Formatter cost model in "units": one per content byte plus this many per escaped character. Escaping
 * runs a replace callback per `&`, `<`, `>` (≈ 100–300 ns each against ≈ 1.5 ns per plain byte), so
 * markup density, not size alone, decides the cost: 400 KB of plain text formats in under 1 ms, of
 * markup-heavy text in 7 ms and more.
 */
const ESCAPE_UNITS = 128;
/** Starting estimate, ns per unit; refined from real tasks on this thread. */
const DEFAULT_FORMAT_NS_PER_UNIT = 2.5;
/** Only tasks formatting at least this many units refine the estimate (smaller ones are noise). */
const CALIBRATE_MIN_UNITS = 64 * 1024;
let formatNsPerUnit = DEFAULT_FORMAT_NS_PER_UNIT;

/** Bytes of each content scanned for markup; longer contents are extrapolated from that prefix. */
const SAMPLE_BYTES = 256;
/** 1 for the bytes the escaper rewrites (`&`, `<`, `>`), 0 otherwise: a branch-free count. */
const ESCAPED = new Uint8Array(256);
ESCAPED[0x26] = ESCAPED[0x3c] = ESCAPED[0x3e] = 1;

/**
 * Estimated formatter cost units of the bytes in [from, to) (see {@link ESCAPE_UNITS}). Counting costs
 * about as much per byte as escaping plain text, so only a prefix is counted: the estimate stays cheap for
 * large batches and is exact for the usual short memories.
 */
export function formatUnits(bytes: Uint8Array, from: number, to: number): number {
  const length = to - from;
  const end = Math.min(to, from + SAMPLE_BYTES);
  let escapes = 0;
  // & < > are ASCII; no byte of a multi-byte UTF-8 sequence is below 0x80, so bytes count characters.
  for (let k = from; k < end; k++) escapes += ESCAPED[bytes[k]!]!;
  return length + (ESCAPE_UNITS * escapes * length) / Math.max(1, end - from);
}

/**
 * Milliseconds before the deadline at which the DP must give up so that greedy + format + return still
 * land by it: {@link FIXED_RESERVE_MS} plus the formatter's estimated cost if every candidate were
 * selected (the worst case; the selection is not known before packing).
 * @param units formatter cost units of all candidates' contents (bytes + 128 × escaped characters).
 */
export function deadlineReserveMs(units: number): number {
  return FIXED_RESERVE_MS + (units * formatNsPerUnit) / 1e6;
}

/**
 * Refines the ns-per-unit estimate from one task that formatted `units` in `ms` (EWMA, so the reserve
 * tracks this thread's real speed — JIT state, CPU — without one outlier ruling it). Small tasks are noise
 * and are ignored.
 */
export function calibrateFormatCost(units: number, ms: number): void {
  if (units < CALIBRATE_MIN_UNITS) return;
  formatNsPerUnit = 0.8 * formatNsPerUnit + 0.2 * ((ms * 1e6) / units);
}
