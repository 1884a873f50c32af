/**
 * Protobuf base-128 varints for the byte paths that write message parts themselves (the spliced answer's
 * field 1 header, the CPU stage's `memories_used` rows; contract.md §2 wire format). Non-negative integers up to
 * 2^53 (a context length, a row length); an int32 field's negative values are memory-rows' own case.
 * Pure: runs in the pool worker and on the main thread.
 */

/** Bytes of `v` as a varint (`v` a non-negative safe integer). */
export function varintLength(v: number): number {
  let n = 1;
  for (; v >= 0x80; v = Math.floor(v / 128)) n++;
  return n;
}

/** Writes `v` as a varint at `at` of `target`. @returns the offset after it. */
export function writeVarint(target: Uint8Array, at: number, v: number): number {
  let i = at;
  while (v >= 0x80) {
    target[i++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  target[i++] = v;
  return i;
}
