/**
 * gRPC message framing for the load tools: requests encoded once into wire frames, and a
 * walk over response bytes that reads a few counters without decoding the response into an object.
 */
import protobuf from 'protobufjs';
import type { AssembleContextRequestInput } from '../../wire/proto.js';
import { ASSEMBLE_METHOD } from './context-client.js';

const { Reader } = protobuf;

/** HTTP/2 path of AssembleContext (contract.md §2). */
export const ASSEMBLE_PATH = ASSEMBLE_METHOD.path;

/**
 * One message as it goes on the wire (gRPC over HTTP/2, "Length-Prefixed-Message"): the 5-byte prefix
 * (uncompressed flag + big-endian length) and the protobuf bytes.
 */
export function grpcFrame(body: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(5 + body.length);
  frame[0] = 0;
  frame.writeUInt32BE(body.length, 1);
  frame.set(body, 5);
  return frame;
}

/** {@link grpcFrame} of an AssembleContext request. */
export function encodeRequestFrame(req: AssembleContextRequestInput): Buffer {
  return grpcFrame(ASSEMBLE_METHOD.requestSerialize(req));
}

/** Frames of every request object encoded so far in this process (the objects own them: a WeakMap). */
const FRAMES = new WeakMap<object, Buffer>();

/**
 * {@link encodeRequestFrame} cached by request object: sources hand out the same objects again, so each
 * distinct request is encoded once per process, not once per run (bench steps reuse one source).
 */
export function frameCache(): FrameCache {
  const cache = FRAMES;
  const frameOf = (req: AssembleContextRequestInput) => {
    let frame = cache.get(req);
    if (frame === undefined) {
      frame = encodeRequestFrame(req);
      cache.set(req, frame);
    }
    return frame;
  };
  return Object.assign(frameOf, {
    prepare: (requests: readonly AssembleContextRequestInput[]) => {
      for (const r of requests) frameOf(r);
    },
  });
}

/** {@link frameCache}'s lookup, plus `prepare` to encode a known list up front (outside the measurement). */
export type FrameCache = ((req: AssembleContextRequestInput) => Buffer) & {
  prepare(requests: readonly AssembleContextRequestInput[]): void;
};

/** What {@link summarizeResponse} reads from a response without decoding it into an object. */
export interface ResponseSummary {
  /** `memory_tokens` (field 7). */
  memoryTokens: number;
  /** Σ `token_estimate` over every `memories_used` row: the tokens of all scored candidates. */
  candidateTokens: number;
  /** `memories_used` rows. */
  candidates: number;
  /** Rows with `exclusion = "budget"`: the packer left them out for lack of room (contract.md §8). */
  budgetExcluded: number;
  /** `degradation.level` ('' when absent). */
  level: string;
  /**
   * `metrics.total_ms`: the service's own time from its handler's start to the answer, ms (whole ms,
   * contract.md §9); null when the answer has no `metrics`.
   */
  totalMs: number | null;
}

const BUDGET = Buffer.from('budget');

/**
 * Walks the AssembleContextResponse bytes (proto/ibex/context/v1/context.proto) for the counters of
 * {@link ResponseSummary}, skipping the assembled text and every other field unread.
 * @throws Error from protobufjs on malformed bytes.
 */
export function summarizeResponse(body: Uint8Array): ResponseSummary {
  const out: ResponseSummary = {
    memoryTokens: 0,
    candidateTokens: 0,
    candidates: 0,
    budgetExcluded: 0,
    level: '',
    totalMs: null,
  };
  const r = Reader.create(body);
  while (r.pos < r.len) {
    const tag = r.uint32();
    const field = tag >>> 3;
    if (field === 4) {
      const end = r.uint32() + r.pos;
      out.candidates++;
      while (r.pos < end) {
        const t = r.uint32();
        const f = t >>> 3;
        if (f === 8) {
          const len = r.uint32();
          const start = r.pos;
          r.skip(len);
          if (len === BUDGET.length && Buffer.from(body.buffer, body.byteOffset + start, len).equals(BUDGET))
            out.budgetExcluded++;
        } else if (f === 11) out.candidateTokens += r.int32();
        else r.skipType(t & 7);
      }
    } else if (field === 7) {
      out.memoryTokens = r.int32();
    } else if (field === 8) {
      const end = r.uint32() + r.pos;
      out.totalMs = 0; // proto3 leaves a zero total_ms off the wire
      while (r.pos < end) {
        const t = r.uint32();
        if (t >>> 3 === 8) out.totalMs = r.int32();
        else r.skipType(t & 7);
      }
    } else if (field === 100) {
      const end = r.uint32() + r.pos;
      while (r.pos < end) {
        const t = r.uint32();
        if (t >>> 3 === 1) out.level = r.string();
        else r.skipType(t & 7);
      }
    } else {
      r.skipType(tag & 7);
    }
  }
  return out;
}
