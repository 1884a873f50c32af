/**
 * Promise-based test client for the gRPC server: ContextAssemblyService, health and reflection.
 * Calls never reject on a gRPC error; they resolve with the final status so tests can assert on code
 * and details exactly.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Client, ClientReadableStream, ServiceDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { service as healthService } from 'grpc-health-check';
import {
  type CallOptions,
  type ContextClient,
  createContextClient,
  type HealthStatus,
  methodOf,
  type UnaryMethod,
} from '../../src/tools/client/context-client.js';
import { PROTO_LOADER_OPTIONS } from '../../src/wire/proto.js';

export type { CallOutcome, HealthStatus } from '../../src/tools/client/context-client.js';

/** Per-call options: `deadlineMs` (ms from now), `metadata`, `signal` (aborting cancels the call). */
export type TestCallOptions = CallOptions;

/** The parts of a reflected FileDescriptorProto that clients such as grpcurl need to link it. */
export interface ReflectedFile {
  name: string;
  package: string;
  dependency: string[];
  /** Every field's type_name, e.g. `.ibex.auth.v1.PrincipalContext`. */
  typeNames: string[];
}

/** A client for one server address: the service client's unary calls, plus streams and reflection. */
export interface TestClient
  extends Pick<ContextClient, 'assemble' | 'searchMemories' | 'recordMemoryFeedback' | 'healthCheck'> {
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

type AnyMethod = UnaryMethod;
const method = methodOf;

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

/** A server reflection v1 answer, as the loader decodes it. */
export interface ReflectionResponse {
  list_services_response?: { service: { name: string }[] } | null;
  file_descriptor_response?: { file_descriptor_proto: Buffer[] } | null;
  error_response?: { error_code: number; error_message: string } | null;
}

/** One request on a new server reflection v1 stream of `client`, and its first answer. */
export function reflectOnce(client: Client, request: Record<string, unknown>): Promise<ReflectionResponse> {
  return new Promise((resolve, reject) => {
    const m = reflectionMethod();
    const stream = client.makeBidiStreamRequest(m.path, m.requestSerialize, m.responseDeserialize);
    stream.on('data', (res: ReflectionResponse) => {
      resolve(res);
      stream.end();
    });
    stream.on('error', reject);
    stream.write(request);
  });
}

/**
 * Creates a client for `addr` (`host:port`, insecure). Close it with `close()` at the end of the test.
 */
export function createTestClient(addr: string): TestClient {
  const context = createContextClient({
    addr,
    // Tests send oversized requests on purpose; the server, not the client, must refuse them.
    channelOptions: { 'grpc.max_send_message_length': -1, 'grpc.max_receive_message_length': -1 },
  });
  const client = context.raw;
  const health = healthService as unknown as ServiceDefinition;

  const reflect = (request: Record<string, unknown>) => reflectOnce(client, request);

  return {
    assemble: context.assemble,
    searchMemories: context.searchMemories,
    recordMemoryFeedback: context.recordMemoryFeedback,
    healthCheck: context.healthCheck,
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
    close: () => context.close(),
  };
}
