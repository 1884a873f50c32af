/** The wire contract (contract.md §2): loader and TypeScript shapes; see docs/design/wire.md. */
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

export const PROTO_FILES = ['ibex/context/v1/context.proto', 'ibex/auth/v1/principal_context.proto'] as const;

export const CONTEXT_SERVICE_NAME = 'ibex.context.v1.ContextAssemblyService';

/** Shared by every consumer of the protos (server, test clients, tools). */
export const PROTO_LOADER_OPTIONS: Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

/** Walks up to the directory holding `proto/ibex` (runs from src/ and dist/). @throws Error if none does. */
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

export const PROTO_DIR = resolveProtoDir();

export const packageDefinition: PackageDefinition = loadSync([...PROTO_FILES], {
  ...PROTO_LOADER_OPTIONS,
  includeDirs: [PROTO_DIR],
});

export const contextServiceDefinition = packageDefinition[
  CONTEXT_SERVICE_NAME
] as unknown as ServiceDefinition;

// Generated wire shapes (`__Output`: every field present), narrowed where the contract fixes values.
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

export type AssembleContextRequestInput = AssembleContextRequest;

export type Exclusion = 'included' | 'budget' | 'filter' | 'truncated' | 'failed' | 'unknown';

export type MemoryUsed = Omit<MemoryUsed__Output, 'exclusion'> & { exclusion: Exclusion };

/** L0 both memory sources usable, L1 one, L2 none (contract.md §10). */
export type DegradationLevel = 'L0' | 'L1' | 'L2';

/** A branch name is any string on the wire: a client may meet branches it does not know. */
export type BranchOutcomeMessage = Omit<BranchOutcome, 'name'> & { name: string };

export type Degradation = Omit<Degradation__Output, 'level' | 'branches'> & {
  level: DegradationLevel;
  branches: BranchOutcomeMessage[];
};

/** The context as spliced UTF-8; the string field is then '' and the serializer writes these bytes as field 1. */
export const ASSEMBLED_UTF8: unique symbol = Symbol('assembled_context as UTF-8');

export type AssembleContextResponse = Omit<
  AssembleContextResponse__Output,
  'memories_used' | 'metrics' | 'degradation'
> & {
  memories_used: MemoryUsed[];
  metrics: AssemblyMetrics;
  degradation: Degradation;
  [ASSEMBLED_UTF8]?: SplicedUtf8;
  [MEMORY_ROWS]?: Uint8Array;
};

/** `memories_used` rows already encoded; `memories_used` is then `[]` and the serializer appends these. */
export const MEMORY_ROWS: unique symbol = Symbol('memories_used as protobuf bytes');

/** A message not in one Buffer: Buffer-compatible for small answers, {@link chunks} for the gathered send. */
export class SplicedMessage {
  readonly byteLength: number;
  readonly #head: Buffer;

  readonly #release: ((source: Uint8Array) => void) | undefined;

  /** @param release gets the source bytes once copied or written; detaching them makes a second copy throw. */
  constructor(
    rest: readonly Uint8Array[],
    readonly context: SplicedUtf8,
    release?: (source: Uint8Array) => void,
  ) {
    this.#head = Buffer.concat([...rest, fieldOneHeader(context.byteLength)]);
    this.byteLength = this.#head.length + context.byteLength;
    this.#release = release;
  }

  copy(target: Uint8Array, targetStart = 0): number {
    target.set(this.#head, targetStart);
    copySpliced(this.context, target, targetStart + this.#head.length);
    this.#release?.(this.context.source);
    return this.byteLength;
  }

  /** Chunks for a gathered write; the source bytes must stay unchanged until {@link written}. */
  chunks(): Uint8Array[] {
    const { spans, own, source } = this.context;
    const out: Uint8Array[] = [this.#head];
    for (let j = 0; j < spans.length; j += 3) {
      const from = spans[j] === FROM_OWN ? own : source;
      const start = spans[j + 1]!;
      const end = spans[j + 2]!;
      // A released (detached) buffer must fail loudly, never send a gap.
      if (end > from.length) throw new Error(`spliced span [${start}, ${end}) past its ${from.length} bytes`);
      out.push(from.subarray(start, end));
    }
    return out;
  }

  /** Recycles the source bytes only after a successful write: a failed one may still hold them. */
  written(ok: boolean): void {
    if (ok) this.#release?.(this.context.source);
  }

  toBuffer(): Buffer {
    const out = Buffer.allocUnsafe(this.byteLength);
    this.copy(out, 0);
    return out;
  }
}

function fieldOneHeader(length: number): Buffer {
  const head = Buffer.allocUnsafe(1 + varintLength(length));
  head[0] = 0x0a;
  writeVarint(head, 1, length);
  return head;
}

function restParts(response: AssembleContextResponse): Uint8Array[] {
  const loader = contextServiceDefinition.AssembleContext!.responseSerialize(response) as Buffer;
  const rows = response[MEMORY_ROWS];
  return rows && rows.byteLength > 0 ? [loader, rows] : [loader];
}

function restOf(response: AssembleContextResponse): Buffer {
  const parts = restParts(response);
  return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts);
}

/** Loader's serializer plus field 1 from {@link ASSEMBLED_UTF8}, as a {@link SplicedMessage} typed as a Buffer. */
export function serializeAssembleResponse(
  response: AssembleContextResponse,
  release?: (source: Uint8Array) => void,
): Buffer {
  const spliced = response[ASSEMBLED_UTF8];
  if (!spliced || spliced.byteLength === 0) return restOf(response);
  return new SplicedMessage(restParts(response), spliced, release) as unknown as Buffer;
}

export function splicedOn(response: AssembleContextResponse, view: Uint8Array | null | undefined): boolean {
  const source = response[ASSEMBLED_UTF8]?.source;
  return view != null && source !== undefined && source.byteLength > 0 && source.buffer === view.buffer;
}

/** Below this a copy into grpc-js's frame is cheaper than a `writev` per span. */
export const GATHER_FROM_BYTES = 64 * 1024;

/** A {@link SplicedMessage} for the gathered send when the context is large; else null. @throws on a wiring bug. */
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

export function serializeAssembleResponseBuffer(response: AssembleContextResponse): Buffer {
  const out = serializeAssembleResponse(response) as Buffer | SplicedMessage;
  return out instanceof SplicedMessage ? out.toBuffer() : out;
}
