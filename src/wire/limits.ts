/** contract.md §11 limits; a leaf module read by settings and the wire decoder. */

/** Code points (items for `recent_messages`). */
export const LIMITS = {
  modelChars: 256,
  queryChars: 8192,
  recentMessages: 100,
  roleChars: 64,
  contentChars: 32_768,
  maxMemories: 100,
} as const;

export const DEFAULT_MAX_MEMORY_CHARS = 65_536;

export const MAX_UTF8_BYTES_PER_CODE_POINT = 4;

function delimited(length: number): number {
  let varint = 1;
  for (let v = length; v >= 0x80; v = Math.floor(v / 128)) varint++;
  return 1 + varint + length;
}

/** Room for the fields §11 does not limit. */
export const UNLIMITED_FIELDS_ALLOWANCE_BYTES = 64 * 1024;

/** The largest request §11 allows (≈ 13.2 MB); the transport accepts nothing larger. See docs/design/wire.md. */
export const MAX_ASSEMBLE_REQUEST_BYTES =
  LIMITS.recentMessages *
    delimited(
      delimited(LIMITS.roleChars * MAX_UTF8_BYTES_PER_CODE_POINT) +
        delimited(LIMITS.contentChars * MAX_UTF8_BYTES_PER_CODE_POINT),
    ) +
  delimited(LIMITS.queryChars * MAX_UTF8_BYTES_PER_CODE_POINT) +
  delimited(LIMITS.modelChars * MAX_UTF8_BYTES_PER_CODE_POINT) +
  UNLIMITED_FIELDS_ALLOWANCE_BYTES;
