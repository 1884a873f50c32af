/** Protobuf varints for byte paths that write message parts themselves; non-negative safe integers. */

export function varintLength(v: number): number {
  let n = 1;
  for (; v >= 0x80; v = Math.floor(v / 128)) n++;
  return n;
}

export function writeVarint(target: Uint8Array, at: number, v: number): number {
  let i = at;
  while (v >= 0x80) {
    target[i++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  target[i++] = v;
  return i;
}
