/**
 * contract.md §11 limits and the largest AssembleContext request they allow on the wire. A leaf module: settings
 * (the transport cap's default) and the wire decoder both read it.
 */

/** Limits of contract.md §11, in Unicode code points (items for `recent_messages`). */
export const LIMITS = {
  modelChars: 256,
  queryChars: 8192,
  recentMessages: 100,
  roleChars: 64,
  contentChars: 32_768,
  maxMemories: 100,
} as const;

/** Default `IBEX_CONTEXT_MAX_MEMORY_CHARS`: longest memory content kept, code points (contract.md §3). */
export const DEFAULT_MAX_MEMORY_CHARS = 65_536;

/** UTF-8 needs at most this many bytes per code point, so a field of b bytes has ≥ ⌈b/4⌉ code points. */
export const MAX_UTF8_BYTES_PER_CODE_POINT = 4;

/** Bytes of a protobuf length-delimited field with a one-byte tag and `length` payload bytes. */
function delimited(length: number): number {
  let varint = 1;
  for (let v = length; v >= 0x80; v = Math.floor(v / 128)) varint++;
  return 1 + varint + length;
}

/**
 * Room for the fields contract.md §11 does not limit (ids, session, directive version, request/trace/span ids,
 * options, principal_context): generous for real callers, and still small next to the history.
 */
export const UNLIMITED_FIELDS_ALLOWANCE_BYTES = 64 * 1024;

/**
 * The largest AssembleContext request contract.md §11 allows, in bytes: 100 messages of a 64-code-point role and a
 * 32,768-code-point content at 4 UTF-8 bytes each, a 8192-code-point query and a 256-code-point model at
 * 4 bytes each, with their protobuf framing, plus {@link UNLIMITED_FIELDS_ALLOWANCE_BYTES}. 13,233,235
 * bytes (≈ 13.2 MB); the transport accepts this and nothing larger.
 */
export const MAX_ASSEMBLE_REQUEST_BYTES =
  LIMITS.recentMessages *
    delimited(
      delimited(LIMITS.roleChars * MAX_UTF8_BYTES_PER_CODE_POINT) +
        delimited(LIMITS.contentChars * MAX_UTF8_BYTES_PER_CODE_POINT),
    ) +
  delimited(LIMITS.queryChars * MAX_UTF8_BYTES_PER_CODE_POINT) +
  delimited(LIMITS.modelChars * MAX_UTF8_BYTES_PER_CODE_POINT) +
  UNLIMITED_FIELDS_ALLOWANCE_BYTES;
