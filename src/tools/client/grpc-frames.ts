// gRPC framing for the load tools: requests encoded once, and counters read from response bytes undecoded.
import protobuf from 'protobufjs';
import type { AssembleContextRequestInput } from '../../wire/proto.js';
import { ASSEMBLE_METHOD } from './context-client.js';

const { Reader } = protobuf;

export const ASSEMBLE_PATH = ASSEMBLE_METHOD.path;

/** One Length-Prefixed-Message: flag, big-endian length, protobuf bytes. */
export function grpcFrame(body: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(5 + body.length);
  frame[0] = 0;
  frame.writeUInt32BE(body.length, 1);
  frame.set(body, 5);
  return frame;
}

export function encodeRequestFrame(req: AssembleContextRequestInput): Buffer {
  return grpcFrame(ASSEMBLE_METHOD.requestSerialize(req));
}

const FRAMES = new WeakMap<object, Buffer>();

/** {@link encodeRequestFrame} cached by request object: a distinct request is encoded once per process. */
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

/** The cache's lookup, plus `prepare` to encode a known list up front (outside the measurement). */
export type FrameCache = ((req: AssembleContextRequestInput) => Buffer) & {
  prepare(requests: readonly AssembleContextRequestInput[]): void;
};

export interface ResponseSummary {
  memoryTokens: number;
  /** Σ `token_estimate` over `memories_used`: the tokens of all scored candidates. */
  candidateTokens: number;
  candidates: number;
  /** Rows the packer left out for lack of room (`exclusion = "budget"`, contract.md §8). */
  budgetExcluded: number;
  level: string;
  /** `metrics.total_ms` (whole ms, contract.md §9); null without `metrics`. */
  totalMs: number | null;
}

const BUDGET = Buffer.from('budget');

/** Reads {@link ResponseSummary}'s counters, skipping every other field. @throws Error on malformed bytes. */
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
