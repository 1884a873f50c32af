/**
 * Promise-based test client for the gRPC server: ContextAssemblyService, health and reflection.
 * Calls never reject on a gRPC error; they resolve with the final status so tests can assert on code
 * and details exactly.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import {
  Client,
  type ClientReadableStream,
  credentials,
  Metadata,
  type MethodDefinition,
  type ServiceDefinition,
  type StatusObject,
} from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { service as healthService } from 'grpc-health-check';
import {
  type AssembleContextRequestInput,
  type AssembleContextResponse,
  contextServiceDefinition,
  PROTO_LOADER_OPTIONS,
  type RecordMemoryFeedbackRequest,
  type RecordMemoryFeedbackResponse,
  type SearchMemoriesRequest,
  type SearchMemoriesResponse,
  type WireInput,
} from '../../src/server/proto.js';

/** Per-call options. */
export interface TestCallOptions {
  /** Caller deadline, ms from now (sent as grpc-timeout). */
  deadlineMs?: number;
  /** Request metadata. */
  metadata?: Metadata | Record<string, string>;
  /** Aborting it cancels the call (the server sees `cancelled`). */
  signal?: AbortSignal;
}

/** Result of one unary call. */
export interface CallOutcome<T> {
  /** The decoded response, or null when the status is not OK. */
  response: T | null;
  /** Response headers (initial metadata); empty for a trailers-only answer. */
  metadata: Metadata;
  /** Final status: code, details, trailers. */
  status: StatusObject;
}

/** Health status as grpc.health.v1 names it. */
export type HealthStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** The parts of a reflected FileDescriptorProto that clients such as grpcurl need to link it. */
export interface ReflectedFile {
  name: string;
  package: string;
  dependency: string[];
  /** Every field's type_name, e.g. `.ibex.auth.v1.PrincipalContext`. */
  typeNames: string[];
}

/** A client for one server address. */
export interface TestClient {
  assemble(
    req: AssembleContextRequestInput,
    opts?: TestCallOptions,
  ): Promise<CallOutcome<AssembleContextResponse>>;
  searchMemories(
    req: WireInput<SearchMemoriesRequest>,
    opts?: TestCallOptions,
  ): Promise<CallOutcome<SearchMemoriesResponse>>;
  recordMemoryFeedback(
    req: WireInput<RecordMemoryFeedbackRequest>,
    opts?: TestCallOptions,
  ): Promise<CallOutcome<RecordMemoryFeedbackResponse>>;
  /** grpc.health.v1.Health/Check. */
  healthCheck(service?: string, opts?: TestCallOptions): Promise<CallOutcome<{ status: HealthStatus }>>;
  /** grpc.health.v1.Health/Watch; `onStatus` gets every update; `cancel()` ends the stream. */
  healthWatch(service: string, onStatus: (s: HealthStatus) => void): { cancel(): void };
  /** Server reflection v1: the fully qualified names of every service the server lists. */
  listServices(): Promise<string[]>;
  /**
   * Server reflection v1: the file descriptors returned for `symbol` (the file and its transitive
   * imports), decoded to what linking needs; empty on a reflection error.
   */
  fileContainingSymbol(symbol: string): Promise<ReflectedFile[]>;
  close(): void;
}

type AnyMethod = MethodDefinition<unknown, unknown>;

function method(def: ServiceDefinition | Record<string, unknown>, name: string): AnyMethod {
  const m = (def as Record<string, AnyMethod | undefined>)[name];
  if (!m) throw new Error(`no method ${name}`);
  return m;
}

function toMetadata(md: TestCallOptions['metadata']): Metadata {
  if (md instanceof Metadata) return md;
  const out = new Metadata();
  for (const [k, v] of Object.entries(md ?? {})) out.set(k, v);
  return out;
}

function unary<Res>(
  client: Client,
  m: AnyMethod,
  req: unknown,
  opts: TestCallOptions = {},
): Promise<CallOutcome<Res>> {
  return new Promise((resolve) => {
    let response: Res | null = null;
    let headers = new Metadata();
    const call = client.makeUnaryRequest(
      m.path,
      m.requestSerialize,
      m.responseDeserialize,
      req,
      toMetadata(opts.metadata),
      opts.deadlineMs === undefined ? {} : { deadline: Date.now() + opts.deadlineMs },
      (err, value) => {
        response = err ? null : ((value as Res | undefined) ?? null);
      },
    );
    call.on('metadata', (md: Metadata) => {
      headers = md;
    });
    // grpc-js calls the callback before emitting `status`, so the response is known here.
    call.on('status', (st: StatusObject) => resolve({ response, metadata: headers, status: st }));
    if (opts.signal) {
      if (opts.signal.aborted) call.cancel();
      else opts.signal.addEventListener('abort', () => call.cancel(), { once: true });
    }
  });
}

const require = createRequire(import.meta.url);

function reflectionMethod(): AnyMethod {
  const root = path.resolve(path.dirname(require.resolve('@grpc/reflection')), '../proto');
  const pkg = loadSync('grpc/reflection/v1/reflection.proto', {
    ...PROTO_LOADER_OPTIONS,
    includeDirs: [root],
  });
  return method(pkg['grpc.reflection.v1.ServerReflection'] as ServiceDefinition, 'ServerReflectionInfo');
}

interface DecodedFile {
  name: string;
  package: string;
  dependency: string[];
  messageType: DecodedMessage[];
}
interface DecodedMessage {
  field: { typeName?: string }[];
  nestedType: DecodedMessage[];
}

/** Decodes with the protobufjs that proto-loader uses (it is not a direct dependency). */
function decodeFile(bytes: Buffer): ReflectedFile {
  const fromLoader = createRequire(require.resolve('@grpc/proto-loader'));
  const codec = (
    fromLoader('protobufjs/ext/descriptor') as {
      FileDescriptorProto: { decode(b: Uint8Array): DecodedFile };
    }
  ).FileDescriptorProto;
  const file = codec.decode(bytes);
  const typeNames: string[] = [];
  const walk = (m: DecodedMessage) => {
    for (const f of m.field) if (f.typeName) typeNames.push(f.typeName);
    m.nestedType.forEach(walk);
  };
  file.messageType.forEach(walk);
  return { name: file.name, package: file.package, dependency: [...file.dependency], typeNames };
}

interface ReflectionResponse {
  list_services_response?: { service: { name: string }[] } | null;
  file_descriptor_response?: { file_descriptor_proto: Buffer[] } | null;
  error_response?: { error_code: number; error_message: string } | null;
}

/**
 * Creates a client for `addr` (`host:port`, insecure). Close it with `close()` at the end of the test.
 */
export function createTestClient(addr: string): TestClient {
  const client = new Client(addr, credentials.createInsecure(), {
    // Tests send oversized requests on purpose; the server, not the client, must refuse them.
    'grpc.max_send_message_length': -1,
    'grpc.max_receive_message_length': -1,
  });
  const def = contextServiceDefinition;
  const health = healthService as unknown as ServiceDefinition;

  const reflect = (request: Record<string, unknown>): Promise<ReflectionResponse> =>
    new Promise((resolve, reject) => {
      const m = reflectionMethod();
      const stream = client.makeBidiStreamRequest(m.path, m.requestSerialize, m.responseDeserialize);
      stream.on('data', (res: ReflectionResponse) => {
        resolve(res);
        stream.end();
      });
      stream.on('error', reject);
      stream.write(request);
    });

  return {
    assemble: (req, opts) => unary(client, method(def, 'AssembleContext'), req, opts),
    searchMemories: (req, opts) => unary(client, method(def, 'SearchMemories'), req, opts),
    recordMemoryFeedback: (req, opts) => unary(client, method(def, 'RecordMemoryFeedback'), req, opts),
    healthCheck: (service = '', opts) => unary(client, method(health, 'Check'), { service }, opts),
    healthWatch(service, onStatus) {
      const m = method(health, 'Watch');
      const stream: ClientReadableStream<{ status: HealthStatus }> = client.makeServerStreamRequest(
        m.path,
        m.requestSerialize,
        m.responseDeserialize as (b: Buffer) => { status: HealthStatus },
        { service },
      );
      stream.on('data', (msg: { status: HealthStatus }) => onStatus(msg.status));
      // The stream always ends in an error (CANCELLED, or UNAVAILABLE on shutdown); statuses are the signal.
      stream.on('error', () => {});
      return { cancel: () => stream.cancel() };
    },
    async listServices() {
      const res = await reflect({ list_services: '*' });
      return (res.list_services_response?.service ?? []).map((s) => s.name);
    },
    async fileContainingSymbol(symbol) {
      const res = await reflect({ file_containing_symbol: symbol });
      return (res.file_descriptor_response?.file_descriptor_proto ?? []).map(decodeFile);
    },
    close: () => client.close(),
  };
}
