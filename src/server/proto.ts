/**
 * Loads the wire contract (SPEC §2) and declares its TypeScript shapes.
 *
 * The loader options are fixed (`keepCase`, `longs: String`, `enums: String`, `defaults`, `oneofs`), so
 * every object below is snake_case exactly as on the wire, int64 values arrive as decimal strings and
 * absent message fields decode as `null`.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ServiceDefinition } from '@grpc/grpc-js';
import { loadSync, type Options, type PackageDefinition } from '@grpc/proto-loader';

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
 * The module runs both from `src/server/` (vitest) and from `dist/src/server/` (compiled), so a fixed
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

/** Package definition of both protos (and google/protobuf/timestamp); reflection needs the whole of it. */
export const packageDefinition: PackageDefinition = loadSync([...PROTO_FILES], {
  ...PROTO_LOADER_OPTIONS,
  includeDirs: [PROTO_DIR],
});

/** Service definition of `ibex.context.v1.ContextAssemblyService`, ready for `server.addService`. */
export const contextServiceDefinition = packageDefinition[
  CONTEXT_SERVICE_NAME
] as unknown as ServiceDefinition;

// ---- Reflection descriptors ----

interface FieldDesc {
  typeName?: string;
  extendee?: string;
}
interface MessageDesc {
  name: string;
  field: FieldDesc[];
  extension: FieldDesc[];
  nestedType: MessageDesc[];
  enumType: { name: string }[];
}
interface FileDesc {
  name: string;
  package: string;
  dependency: string[];
  messageType: MessageDesc[];
  enumType: { name: string }[];
  service: { name: string; method: { inputType?: string; outputType?: string }[] }[];
  extension: FieldDesc[];
}
interface DescriptorCodec {
  decode(bytes: Uint8Array): FileDesc;
  encode(file: FileDesc): { finish(): Uint8Array };
}

/**
 * Returns a copy of `def` whose file descriptors list their imports and use fully qualified type names.
 *
 * proto-loader merges files per package and emits descriptors with no `dependency` entries and
 * package-relative type names (`auth.v1.PrincipalContext`); @grpc/reflection serves them as is, and
 * strict clients (grpcurl, via Go's protodesc) then refuse to link a message that uses a type from
 * another package (grpc/grpc-node#3034). Linking here keeps `grpcurl describe` working.
 */
export function linkFileDescriptors(def: PackageDefinition): PackageDefinition {
  // The descriptor codec of the protobufjs that proto-loader itself uses, so the encodings match.
  const fromLoader = createRequire(createRequire(import.meta.url).resolve('@grpc/proto-loader'));
  const codec = (fromLoader('protobufjs/ext/descriptor') as { FileDescriptorProto: DescriptorCodec })
    .FileDescriptorProto;

  // Only message and enum entries carry descriptors at the top level; that is all reflection reads.
  const protosOf = (entry: object): Buffer[] => {
    const protos = (entry as { fileDescriptorProtos?: unknown }).fileDescriptorProtos;
    return Array.isArray(protos) ? (protos as Buffer[]) : [];
  };
  const decoded = new Map<string, FileDesc>();
  for (const entry of Object.values(def)) {
    for (const bytes of protosOf(entry)) {
      const file = codec.decode(bytes);
      if (!decoded.has(file.name)) decoded.set(file.name, file);
    }
  }

  const owner = new Map<string, string>();
  const indexMessage = (scope: string, m: MessageDesc, fileName: string) => {
    const fqn = `${scope}.${m.name}`;
    owner.set(fqn, fileName);
    for (const e of m.enumType) owner.set(`${fqn}.${e.name}`, fileName);
    for (const n of m.nestedType) indexMessage(fqn, n, fileName);
  };
  for (const file of decoded.values()) {
    const pkg = file.package ? `.${file.package}` : '';
    for (const m of file.messageType) indexMessage(pkg, m, file.name);
    for (const e of file.enumType) owner.set(`${pkg}.${e.name}`, file.name);
    for (const s of file.service) owner.set(`${pkg}.${s.name}`, file.name);
  }

  // Protobuf scoping: try the innermost scope first, then each enclosing one.
  const resolve = (ref: string, scope: string): string | undefined => {
    if (ref.startsWith('.')) return owner.has(ref) ? ref : undefined;
    for (let s = scope; ; s = s.slice(0, Math.max(0, s.lastIndexOf('.')))) {
      const candidate = `${s}.${ref}`;
      if (owner.has(candidate)) return candidate;
      if (s === '') return undefined;
    }
  };

  const encoded = new Map<string, Buffer>();
  for (const file of decoded.values()) {
    const deps = new Set(file.dependency);
    const link = (ref: string | undefined, scope: string): string | undefined => {
      if (!ref) return ref;
      const fqn = resolve(ref, scope);
      if (fqn === undefined) return ref;
      const from = owner.get(fqn)!;
      if (from !== file.name) deps.add(from);
      return fqn;
    };
    const linkMessage = (scope: string, m: MessageDesc) => {
      const fqn = `${scope}.${m.name}`;
      for (const f of [...m.field, ...m.extension]) {
        f.typeName = link(f.typeName, fqn);
        f.extendee = link(f.extendee, fqn);
      }
      for (const n of m.nestedType) linkMessage(fqn, n);
    };
    const pkg = file.package ? `.${file.package}` : '';
    for (const m of file.messageType) linkMessage(pkg, m);
    for (const f of file.extension) {
      f.typeName = link(f.typeName, pkg);
      f.extendee = link(f.extendee, pkg);
    }
    for (const s of file.service) {
      for (const m of s.method) {
        m.inputType = link(m.inputType, pkg);
        m.outputType = link(m.outputType, pkg);
      }
    }
    file.dependency = [...deps];
    encoded.set(file.name, Buffer.from(codec.encode(file).finish()));
  }

  const out: PackageDefinition = {};
  for (const [name, entry] of Object.entries(def)) {
    const protos = protosOf(entry);
    out[name] =
      protos.length === 0
        ? entry
        : ({
            ...entry,
            fileDescriptorProtos: protos.map((b) => encoded.get(codec.decode(b).name) ?? b),
          } as typeof entry);
  }
  return out;
}

// ---- Wire shapes (decoded with PROTO_LOADER_OPTIONS; all fields present) ----

/** `google.protobuf.Timestamp`; `seconds` is int64, hence a decimal string. */
export interface Timestamp {
  seconds: string;
  nanos: number;
}

/** `ibex.auth.v1.PrincipalContext` (SPEC §2). */
export interface PrincipalContext {
  org_id: string;
  principal_id: string;
  agent_id: string;
  principal_type: string;
  authz_snapshot_id: string;
  authz_snapshot_digest: string;
  authority: string;
  issued_at: Timestamp | null;
  expires_at: Timestamp | null;
  request_id: string;
  trace_id: string;
  source: string;
  /** int64 permission bits as a decimal string. */
  permissions: string;
  token_id: string;
}

/** `ibex.context.v1.Message`: one history message. */
export interface Message {
  role: string;
  content: string;
}

/** `ibex.context.v1.AssemblyOptions`. The four weights are accepted and not yet used. */
export interface AssemblyOptions {
  skip_cold_memories: boolean;
  skip_hot_memories: boolean;
  recency_weight: number;
  relevance_weight: number;
  usefulness_weight: number;
  confidence_weight: number;
  /** 0 = no cap, else 1..100. */
  max_memories: number;
}

/** `ibex.context.v1.AssembleContextRequest` as the server receives it. */
export interface AssembleContextRequest {
  agent_id: string;
  org_id: string;
  session_id: string;
  query: string;
  model: string;
  directive_version_id: string;
  available_tokens: number;
  recent_messages: Message[];
  options: AssemblyOptions | null;
  request_id: string;
  trace_id: string;
  span_id: string;
  principal_context: PrincipalContext | null;
}

/** `ibex.context.v1.AssemblyMetrics`: ms (int, half-to-even, ≥ 0) except the `_us` fields (µs). */
export interface AssemblyMetrics {
  budget_calculation_ms: number;
  directive_load_ms: number;
  hot_memory_retrieval_ms: number;
  cold_memory_retrieval_ms: number;
  ranking_ms: number;
  packing_ms: number;
  formatting_ms: number;
  total_ms: number;
  candidates_evaluated: number;
  /** Queue wait of the CPU task, µs. */
  pool_wait_us: number;
  /** Run time of the CPU task, µs. */
  pool_run_us: number;
}

/** Why a scored candidate is or is not in the context (SPEC §2 MemoryUsed.exclusion). */
export type Exclusion = 'included' | 'budget' | 'filter' | 'truncated' | 'failed' | 'unknown';

/** `ibex.context.v1.MemoryUsed`: one row per scored candidate. */
export interface MemoryUsed {
  memory_id: string;
  /** The interim score (SPEC §7). */
  composite_score: number;
  /** = similarity. */
  relevance_score: number;
  /** Always 0 under interim_v1. */
  recency_score: number;
  /** Always 0 under interim_v1. */
  usefulness_score: number;
  rank: number;
  category: string;
  exclusion: Exclusion;
  similarity: number;
  confidence: number;
  token_estimate: number;
}

/** Degradation level (SPEC §10): L0 both memory sources usable, L1 one, L2 none. */
export type DegradationLevel = 'L0' | 'L1' | 'L2';

/** `ibex.context.v1.BranchOutcome` (wire form of `types.ts` BranchOutcome). */
export interface BranchOutcomeMessage {
  name: string;
  status: 'success' | 'timeout' | 'error' | 'skipped';
  /** ms, monotonic clock. */
  latency_ms: number;
  detail: string;
}

/** `ibex.context.v1.Degradation`. */
export interface Degradation {
  level: DegradationLevel;
  /** True when a skip flag was set. */
  intentional: boolean;
  reasons: string[];
  branches: BranchOutcomeMessage[];
}

/**
 * Where a response carries `assembled_context` as UTF-8 bytes made by the CPU stage; the response's
 * string field is then '' and {@link serializeAssembleResponse} writes these bytes as field 1.
 */
export const ASSEMBLED_UTF8: unique symbol = Symbol('assembled_context as UTF-8');

/** `ibex.context.v1.AssembleContextResponse`. */
export interface AssembleContextResponse {
  assembled_context: string;
  /** See {@link ASSEMBLED_UTF8}; never on the wire as such. */
  [ASSEMBLED_UTF8]?: Uint8Array;
  tokens_used: number;
  memories_included: number;
  memories_used: MemoryUsed[];
  directive_tokens: number;
  history_tokens: number;
  memory_tokens: number;
  metrics: AssemblyMetrics;
  request_id: string;
  trace_id: string;
  span_id: string;
  /** `interim_v1`. */
  score_schema: string;
  degradation: Degradation;
}

/** `ibex.context.v1.SearchMemoriesRequest` (deferred, ADR-0038). */
export interface SearchMemoriesRequest {
  agent_id: string;
  org_id: string;
  query: string;
  limit: number;
  min_similarity: number;
  categories: string[];
  tags: string[];
  session_id: string;
}

/** `ibex.context.v1.Memory`. */
export interface Memory {
  id: string;
  content: string;
  category: string;
  confidence: number;
  composite_score: number;
  retrieval_count: number;
  created_at: string;
}

/** `ibex.context.v1.SearchMemoriesResponse`. */
export interface SearchMemoriesResponse {
  memories: Memory[];
  total_candidates: number;
  search_time_ms: number;
}

/** `ibex.context.v1.RecordMemoryFeedbackRequest` (deferred, ADR-0038). */
export interface RecordMemoryFeedbackRequest {
  memory_ids: string[];
  session_id: string;
  trace_id: string;
  org_id: string;
  feedback: string;
}

/** `ibex.context.v1.MemoryScoreUpdate`. */
export interface MemoryScoreUpdate {
  memory_id: string;
  previous_score: number;
  new_score: number;
}

/** `ibex.context.v1.RecordMemoryFeedbackResponse`. */
export interface RecordMemoryFeedbackResponse {
  success: boolean;
  updates: MemoryScoreUpdate[];
}

/** Recursively optional form of a wire shape: what a client may send (proto3 fills the defaults). */
export type WireInput<T> = T extends (infer U)[]
  ? WireInput<U>[]
  : T extends object
    ? { [K in keyof T]?: WireInput<T[K]> | null }
    : T;

/** What a client may send as an AssembleContextRequest. */
export type AssembleContextRequestInput = WireInput<AssembleContextRequest>;

/**
 * AssembleContext's response serializer: the loader's, plus field 1 (`assembled_context`) written from
 * {@link ASSEMBLED_UTF8} bytes when present — one copy instead of re-encoding a string that may be
 * megabytes long on the main thread. Decoders accept fields in any order; for a repeated scalar the last wins.
 */
export function serializeAssembleResponse(response: AssembleContextResponse): Buffer {
  const rest = contextServiceDefinition.AssembleContext!.responseSerialize(response) as Buffer;
  const utf8 = response[ASSEMBLED_UTF8];
  if (!utf8 || utf8.length === 0) return rest;
  const head: number[] = [0x0a];
  for (let v = utf8.length; ; v = Math.floor(v / 128)) {
    if (v < 0x80) {
      head.push(v);
      break;
    }
    head.push((v & 0x7f) | 0x80);
  }
  // After the rest: protobufjs writes the empty string field too, and the last occurrence wins.
  return Buffer.concat([rest, Buffer.from(head), utf8]);
}
