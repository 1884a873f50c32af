/**
 * Loads the wire contract (SPEC §2) and declares its TypeScript shapes.
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
import type { BranchOutcome } from '../types.js';

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

/** Package definition of both protos (and google/protobuf/timestamp). */
export const packageDefinition: PackageDefinition = loadSync([...PROTO_FILES], {
  ...PROTO_LOADER_OPTIONS,
  includeDirs: [PROTO_DIR],
});

/** Service definition of `ibex.context.v1.ContextAssemblyService`, ready for `server.addService`. */
export const contextServiceDefinition = packageDefinition[
  CONTEXT_SERVICE_NAME
] as unknown as ServiceDefinition;

// Reflection serves real file descriptors built in reflection-descriptors.ts (issue 13).

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

/**
 * `ibex.context.v1.BranchOutcome`: the `types.ts` {@link BranchOutcome} the pipeline builds, its name any
 * string on the wire (a client may meet branches this version does not know).
 */
export type BranchOutcomeMessage = Omit<BranchOutcome, 'name'> & { name: string };

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
