/**
 * Loads the wire contract (contract.md §2) and declares its TypeScript shapes.
 *
 * The loader options are fixed (`keepCase`, `longs: String`, `enums: String`, `defaults`, `oneofs`), so
 * every object below is snake_case exactly as on the wire, int64 values arrive as decimal strings and
 * absent message fields decode as `null`.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ServiceDefinition } from '@grpc/grpc-js';
import { loadSync, type Options, type PackageDefinition } from '@grpc/proto-loader';
import type { AssembleContextRequest } from '../generated/proto/ibex/context/v1/AssembleContextRequest.js';
import type { AssembleContextResponse__Output } from '../generated/proto/ibex/context/v1/AssembleContextResponse.js';
import type { AssemblyMetrics__Output as AssemblyMetrics } from '../generated/proto/ibex/context/v1/AssemblyMetrics.js';
import type { Degradation__Output } from '../generated/proto/ibex/context/v1/Degradation.js';
import type { MemoryUsed__Output } from '../generated/proto/ibex/context/v1/MemoryUsed.js';
import { copySpliced, FROM_OWN, type SplicedUtf8 } from './spliced.js';
import type { BranchOutcome } from './types.js';
import { varintLength, writeVarint } from './varint.js';

/** Proto files relative to {@link PROTO_DIR}. */
export const PROTO_FILES = ['ibex/context/v1/context.proto', 'ibex/auth/v1/principal_context.proto'] as const;

/** Fully qualified name of the service (health and reflection use it). */
export const CONTEXT_SERVICE_NAME = 'ibex.context.v1.ContextAssemblyService';

/** The loader options every consumer of the protos must share (server, test clients, tools). */
export const PROTO_LOADER_OPTIONS: Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

/**
 * Finds the project's `proto/` directory by walking up from `fromDir` until `proto/ibex` exists.
 * The module runs both from `src/wire/` (vitest) and from `dist/src/wire/` (compiled), so a fixed
 * relative path would be right in only one of them.
 * @throws Error when no ancestor holds `proto/ibex`.
 */
export function resolveProtoDir(fromDir: string = path.dirname(fileURLToPath(import.meta.url))): string {
  let dir = path.resolve(fromDir);
  for (;;) {
    const candidate = path.join(dir, 'proto');
    if (existsSync(path.join(candidate, 'ibex'))) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`cannot find proto/ibex above ${fromDir}`);
    dir = parent;
  }
}

/** Absolute path of the project's `proto/` directory. */
export const PROTO_DIR = resolveProtoDir();

/** Package definition of both protos (and google/protobuf/timestamp). */
export const packageDefinition: PackageDefinition = loadSync([...PROTO_FILES], {
  ...PROTO_LOADER_OPTIONS,
  includeDirs: [PROTO_DIR],
});

/** Service definition of `ibex.context.v1.ContextAssemblyService`, ready for `server.addService`. */
export const contextServiceDefinition = packageDefinition[
  CONTEXT_SERVICE_NAME
] as unknown as ServiceDefinition;

// Reflection serves real file descriptors built in reflection-descriptors.ts.

// ---- Wire shapes: generated from proto/ by proto-loader-gen-types (scripts/gen-proto-types.mjs) with
// PROTO_LOADER_OPTIONS, so every field is present on what the loader decodes (`__Output`). Narrowed here
// only where the SPEC fixes a string's values or the server always sets a message field. ----

// Plain wire shapes, as the loader decodes them (`__Output`: every field present): google.protobuf
// Timestamp (`seconds` int64 as a decimal string), ibex.auth.v1 PrincipalContext (contract.md §2; `permissions`
// int64 as a decimal string), and ibex.context.v1 Message, AssemblyOptions (the four weights are accepted
// and not yet used), AssembleContextRequest as the server receives it, AssemblyMetrics (ms, int,
// half-to-even, ≥ 0, except `pool_wait_us`/`pool_run_us` in µs), and the deferred (ADR-0038)
// SearchMemories and RecordMemoryFeedback messages. What a client may send is the generated input shape
// (no `__Output`: every field optional, proto3 fills the defaults; int64 as number, string or Long).
export type { Timestamp__Output as Timestamp } from '../generated/proto/google/protobuf/Timestamp.js';
export type { PrincipalContext__Output as PrincipalContext } from '../generated/proto/ibex/auth/v1/PrincipalContext.js';
export type { AssembleContextRequest__Output as AssembleContextRequest } from '../generated/proto/ibex/context/v1/AssembleContextRequest.js';
export type { AssemblyOptions__Output as AssemblyOptions } from '../generated/proto/ibex/context/v1/AssemblyOptions.js';
export type { Memory__Output as Memory } from '../generated/proto/ibex/context/v1/Memory.js';
export type { MemoryScoreUpdate__Output as MemoryScoreUpdate } from '../generated/proto/ibex/context/v1/MemoryScoreUpdate.js';
export type { Message__Output as Message } from '../generated/proto/ibex/context/v1/Message.js';
export type { RecordMemoryFeedbackRequest__Output as RecordMemoryFeedbackRequest } from '../generated/proto/ibex/context/v1/RecordMemoryFeedbackRequest.js';
export type { RecordMemoryFeedbackResponse__Output as RecordMemoryFeedbackResponse } from '../generated/proto/ibex/context/v1/RecordMemoryFeedbackResponse.js';
export type { SearchMemoriesRequest__Output as SearchMemoriesRequest } from '../generated/proto/ibex/context/v1/SearchMemoriesRequest.js';
export type { SearchMemoriesResponse__Output as SearchMemoriesResponse } from '../generated/proto/ibex/context/v1/SearchMemoriesResponse.js';
export type { AssemblyMetrics };

/** What a client may send as an AssembleContextRequest (the generated input shape). */
export type AssembleContextRequestInput = AssembleContextRequest;

/** Why a scored candidate is or is not in the context (contract.md §2 MemoryUsed.exclusion). */
export type Exclusion = 'included' | 'budget' | 'filter' | 'truncated' | 'failed' | 'unknown';

/** `ibex.context.v1.MemoryUsed`: one row per scored candidate; `composite_score` is the interim score. */
export type MemoryUsed = Omit<MemoryUsed__Output, 'exclusion'> & { exclusion: Exclusion };

/** Degradation level (contract.md §10): L0 both memory sources usable, L1 one, L2 none. */
export type DegradationLevel = 'L0' | 'L1' | 'L2';

/**
 * `ibex.context.v1.BranchOutcome`: the `types.ts` {@link BranchOutcome} the pipeline builds, its name any
 * string on the wire (a client may meet branches this version does not know).
 */
export type BranchOutcomeMessage = Omit<BranchOutcome, 'name'> & { name: string };

/** `ibex.context.v1.Degradation`; `intentional` is true when a skip flag was set. */
export type Degradation = Omit<Degradation__Output, 'level' | 'branches'> & {
  level: DegradationLevel;
  branches: BranchOutcomeMessage[];
};

/**
 * Where a response carries `assembled_context` as spliced UTF-8 made by the CPU stage (or the degraded
 * answer); the response's string field is then '' and {@link serializeAssembleResponse} writes these
 * bytes as field 1.
 */
export const ASSEMBLED_UTF8: unique symbol = Symbol('assembled_context as UTF-8');

/** `ibex.context.v1.AssembleContextResponse`; the server always sets metrics and degradation. */
export type AssembleContextResponse = Omit<
  AssembleContextResponse__Output,
  'memories_used' | 'metrics' | 'degradation'
> & {
  memories_used: MemoryUsed[];
  metrics: AssemblyMetrics;
  degradation: Degradation;
  /** See {@link ASSEMBLED_UTF8}; never on the wire as such. */
  [ASSEMBLED_UTF8]?: SplicedUtf8;
  /** See {@link MEMORY_ROWS}; never on the wire as such. */
  [MEMORY_ROWS]?: Uint8Array;
};

/**
 * Where a response carries its `memories_used` rows already encoded, by the CPU stage or the degraded
 * answer (repeated field 4; src/format/memory-rows.ts): `memories_used` is then `[]` and the
 * serializer appends these bytes to the loader's. Repeated message fields may come in any order on the
 * wire (contract.md §2, protobuf encoding rules), so clients decode the same rows.
 */
export const MEMORY_ROWS: unique symbol = Symbol('memories_used as protobuf bytes');

/**
 * A serialized message that is not one contiguous Buffer: the loader's bytes for every other field, then
 * field 1 from spliced bytes. A small one goes grpc-js 1.14's way: `serializeMessage` reads only
 * `byteLength` and calls `copy(frame, 5)` to place the message in its own length-prefixed frame. A large
 * one (up to ~13 MB of history) is written as {@link chunks} by the gathered send
 * (src/grpc/patches/gathered-send.ts), so no thread allocates or copies a 10 MB frame (a fresh 10 MB
 * allocation costs ~14–28 ms of page faults on the 2-core VM).
 */
export class SplicedMessage {
  readonly byteLength: number;
  readonly #head: Buffer;

  readonly #release: ((source: Uint8Array) => void) | undefined;

  /**
   * @param rest the bytes of every other field, in parts (the loader's, then the CPU stage's rows),
   *   joined once here with field 1's header.
   * @param release called with the history's source bytes once {@link copy} has copied them, or once a
   *   gathered write of them succeeded ({@link written}): the server hands a recycled request buffer
   *   back to its pool there (src/util/message-buffers.ts), which detaches it, so a second copy throws
   *   instead of reading another request's bytes.
   */
  constructor(
    rest: readonly Uint8Array[],
    readonly context: SplicedUtf8,
    release?: (source: Uint8Array) => void,
  ) {
    this.#head = Buffer.concat([...rest, fieldOneHeader(context.byteLength)]);
    this.byteLength = this.#head.length + context.byteLength;
    this.#release = release;
  }

  /** Buffer-compatible: writes the whole message at `targetStart` of `target`. @returns bytes written. */
  copy(target: Uint8Array, targetStart = 0): number {
    target.set(this.#head, targetStart);
    copySpliced(this.context, target, targetStart + this.#head.length);
    this.#release?.(this.context.source);
    return this.byteLength;
  }

  /**
   * The message as chunks for a gathered write (src/grpc/patches/gathered-send.ts): the joined rest and field
   * 1's header, then one view per span of the context. Nothing is copied, so the source bytes must stay
   * as they are until {@link written}.
   */
  chunks(): Uint8Array[] {
    const { spans, own, source } = this.context;
    const out: Uint8Array[] = [this.#head];
    for (let j = 0; j < spans.length; j += 3) {
      const from = spans[j] === FROM_OWN ? own : source;
      const start = spans[j + 1]!;
      const end = spans[j + 2]!;
      // As in copySpliced: a released (detached) buffer must fail loudly, never send a gap.
      if (end > from.length) throw new Error(`spliced span [${start}, ${end}) past its ${from.length} bytes`);
      out.push(from.subarray(start, end));
    }
    return out;
  }

  /**
   * The gathered write of {@link chunks} is over: the history's source bytes go back to their pool only
   * if it succeeded. After a failed write the stream may still have held them; a buffer that is never
   * recycled is merely garbage, while one recycled too early could carry another request's bytes.
   */
  written(ok: boolean): void {
    if (ok) this.#release?.(this.context.source);
  }

  /** The message as one Buffer (tests and tools). */
  toBuffer(): Buffer {
    const out = Buffer.allocUnsafe(this.byteLength);
    this.copy(out, 0);
    return out;
  }
}

/** Tag and length of field 1 (`assembled_context`, length-delimited) for `length` bytes. */
function fieldOneHeader(length: number): Buffer {
  const head = Buffer.allocUnsafe(1 + varintLength(length));
  head[0] = 0x0a;
  writeVarint(head, 1, length);
  return head;
}

/**
 * The loader's bytes for every field but the context (its string field is '' then), and the CPU stage's
 * {@link MEMORY_ROWS} after them: parts, so that the spliced serializer joins them with field 1's header
 * in one copy.
 */
function restParts(response: AssembleContextResponse): Uint8Array[] {
  const loader = contextServiceDefinition.AssembleContext!.responseSerialize(response) as Buffer;
  const rows = response[MEMORY_ROWS];
  return rows && rows.byteLength > 0 ? [loader, rows] : [loader];
}

/** {@link restParts} as one Buffer. */
function restOf(response: AssembleContextResponse): Buffer {
  const parts = restParts(response);
  return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts);
}

/**
 * AssembleContext's response serializer: the loader's, plus field 1 (`assembled_context`) from
 * {@link ASSEMBLED_UTF8} bytes when present, as a {@link SplicedMessage} (typed
 * as the Buffer that grpc-js expects; it only copies it). Decoders accept fields in any order; for a
 * repeated scalar the last wins, and protobufjs writes the empty string field too, hence field 1 after
 * the rest.
 * @param release see {@link SplicedMessage}; the server passes its message pool's, tools pass none.
 */
export function serializeAssembleResponse(
  response: AssembleContextResponse,
  release?: (source: Uint8Array) => void,
): Buffer {
  const spliced = response[ASSEMBLED_UTF8];
  if (!spliced || spliced.byteLength === 0) return restOf(response);
  return new SplicedMessage(restParts(response), spliced, release) as unknown as Buffer;
}

/** Whether `response`'s spliced context reads `view`'s buffer (the request's history bytes). */
export function splicedOn(response: AssembleContextResponse, view: Uint8Array | null | undefined): boolean {
  const source = response[ASSEMBLED_UTF8]?.source;
  return view != null && source !== undefined && source.byteLength > 0 && source.buffer === view.buffer;
}

/**
 * Contexts of this many UTF-8 bytes or more are written as gathered chunks; a smaller one is copied into
 * grpc-js's frame, where one small copy costs less than a `writev` of one chunk per span.
 */
export const GATHER_FROM_BYTES = 64 * 1024;

/**
 * For grpc-js's send path (src/grpc/patches/gathered-send.ts, `sendGatheredMessages`): the response as a
 * {@link SplicedMessage} to write in chunks when its spliced context is {@link GATHER_FROM_BYTES} or
 * more; null for every other value (a small context is copied into grpc-js's frame as before).
 * @param serialize the call's serializer ({@link serializeAssembleResponse} with the server's release).
 * @throws Error when `serialize` does not give a SplicedMessage for a spliced context (a wiring bug).
 */
export function gatheredAnswer(
  value: unknown,
  serialize: (value: unknown) => unknown,
): SplicedMessage | null {
  const response = value as AssembleContextResponse | null;
  if (response === null || typeof response !== 'object') return null;
  const spliced = response[ASSEMBLED_UTF8];
  if (spliced === undefined || spliced.byteLength < GATHER_FROM_BYTES) return null;
  const message = serialize(value);
  if (!(message instanceof SplicedMessage)) throw new Error('a spliced answer did not serialize as spliced');
  return message;
}

/** {@link serializeAssembleResponse} as one contiguous Buffer (tests and tools). */
export function serializeAssembleResponseBuffer(response: AssembleContextResponse): Buffer {
  const out = serializeAssembleResponse(response) as Buffer | SplicedMessage;
  return out instanceof SplicedMessage ? out.toBuffer() : out;
}
