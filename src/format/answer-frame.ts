/**
 * The AssembleContext answer as a prebuilt gRPC frame (issue 9, isolation): for a large context the CPU
 * stage copies the spliced UTF-8 (SPEC §9; src/format/spliced.ts) into one buffer laid out as
 *
 *   [headroom][field 1 tag + varint length][context bytes]
 *
 * and the main thread only writes the loader-encoded rest of the message and the 5-byte gRPC prefix into
 * the headroom, right before field 1: `[prefix][rest][field 1]` is exactly the message today's serializer
 * writes (rest first, then field 1 — the rest holds the loader's empty field 1, and for a string field
 * the last occurrence wins, SPEC §2), so clients decode the same bytes. grpc-js then sends that frame as
 * it is (src/server/grpc-internals.ts): no ~10 MB allocation and copy on the main thread per answer.
 *
 * Pure: runs in the pool worker and on the main thread.
 */
import { copySpliced, FROM_OWN, type SplicedUtf8 } from './spliced.js';
import { varintLength, writeVarint } from './varint.js';

/** Contexts of this many UTF-8 bytes or more are framed by the CPU stage; smaller ones stay spliced. */
export const FRAME_FROM_BYTES = 64 * 1024;

/** gRPC length prefix: 1 byte compressed flag + 4 bytes big-endian length. */
export const GRPC_PREFIX_BYTES = 5;

/**
 * Room before field 1 for the answer's other fields besides each memory row's id and category:
 * metrics, budget ints, request/trace/span ids, score schema, degradation reasons and branches.
 * What does not fit goes the spliced way ({@link frameContext}), so this only has to be right for
 * real answers, not for every one.
 */
export const FRAME_BASE_HEADROOM_BYTES = 16 * 1024;

/** Headroom per memory row on top of its id and category bytes: tags, lengths, floats, ints, exclusion. */
export const FRAME_ROW_HEADROOM_BYTES = 64;

/** A context in a buffer that leaves `headroom` bytes in front of field 1 for the rest of the answer. */
export interface AnswerFrame {
  /** `[headroom][0x0a varint(contextBytes)][context]`; its own ArrayBuffer (transferred). */
  buffer: Uint8Array;
  /** Offset of field 1's tag in `buffer` (= the headroom, bytes). */
  fieldAt: number;
  /** Offset of the context's first byte in `buffer`. */
  contextAt: number;
  /** UTF-8 bytes of the context. */
  contextBytes: number;
}

/** Writes protobuf field 1 (length-delimited) tag and the varint `length` at `at`. @returns the end. */
export function writeFieldOneHeader(target: Uint8Array, at: number, length: number): number {
  target[at] = 0x0a;
  return writeVarint(target, at + 1, length);
}

/** Bytes of field 1's tag and varint length for `length` context bytes. */
export function fieldOneHeaderBytes(length: number): number {
  return 1 + varintLength(length);
}

/**
 * Copies the spliced context into a fresh frame buffer with `headroom` bytes in front of field 1 (one
 * allocation and one memcpy per span, on the calling thread — the CPU stage's).
 * @param headroom bytes for the gRPC prefix and the rest of the message; ≥ {@link GRPC_PREFIX_BYTES}.
 */
export function buildAnswerFrame(text: SplicedUtf8, headroom: number): AnswerFrame {
  const fieldAt = Math.max(GRPC_PREFIX_BYTES, Math.ceil(headroom));
  const contextAt = fieldAt + fieldOneHeaderBytes(text.byteLength);
  const buffer = new Uint8Array(contextAt + text.byteLength);
  writeFieldOneHeader(buffer, fieldAt, text.byteLength);
  copySpliced(text, buffer, contextAt);
  return { buffer, fieldAt, contextAt, contextBytes: text.byteLength };
}

/**
 * Completes the frame in place: `rest` (the other fields, loader-encoded) right before field 1, the gRPC
 * prefix (uncompressed, big-endian message length) before that.
 * @returns the whole gRPC frame as a view of the frame's buffer, or null when `rest` does not fit the
 *   headroom (the caller then serializes the spliced way, {@link frameContext}).
 */
export function finishAnswerFrame(frame: AnswerFrame, rest: Uint8Array): Buffer | null {
  const start = frame.fieldAt - rest.byteLength - GRPC_PREFIX_BYTES;
  if (start < 0) return null;
  const out = Buffer.from(
    frame.buffer.buffer,
    frame.buffer.byteOffset + start,
    frame.buffer.byteLength - start,
  );
  out.set(rest, GRPC_PREFIX_BYTES);
  out[0] = 0;
  out.writeUInt32BE(out.byteLength - GRPC_PREFIX_BYTES, 1);
  return out;
}

/** The frame's context as spliced UTF-8 (one span of the frame's bytes), for the spliced serializer. */
export function frameContext(frame: AnswerFrame): SplicedUtf8 {
  return {
    own: frame.buffer,
    source: new Uint8Array(0),
    spans: Uint32Array.of(FROM_OWN, frame.contextAt, frame.contextAt + frame.contextBytes),
    byteLength: frame.contextBytes,
  };
}
