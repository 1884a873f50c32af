/**
 * Server reflection read by an independent strict client: @bufbuild/protobuf decodes the
 * served FileDescriptorProtos with its own codec, resolves every import by file name over reflection
 * (`file_by_filename`), builds a registry with `createFileRegistry` (which rejects malformed descriptors,
 * e.g. a `type_name` on a scalar field) and calls AssembleContext with messages built from the served
 * descriptors alone. The server is the real gRPC server on 127.0.0.1 with a test-double pipeline.
 */

import { createRequire } from 'node:module';
import {
  create,
  createFileRegistry,
  type DescMessage,
  fromBinary,
  type Message,
  toBinary,
} from '@bufbuild/protobuf';
import { type FileDescriptorProto, FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { Client, credentials, Metadata } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import type { ValidatedRequest } from '../../src/request/validate.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { packageDefinition } from '../../src/wire/proto.js';
import { type ReflectionResponse, reflectOnce } from '../helpers/grpc-client.js';
import { stubResponse } from '../helpers/stub-response.js';

const _require = createRequire(import.meta.url);
const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';

let server: GrpcServer;
let client: Client;
const seen: ValidatedRequest[] = [];

/** One request on the reflection stream; only the envelope uses proto-loader, never the descriptors. */
const reflect = (request: Record<string, unknown>) => reflectOnce(client, request);

const decode = (res: ReflectionResponse): FileDescriptorProto[] => {
  if (res.error_response) throw new Error(res.error_response.error_message);
  return (res.file_descriptor_response?.file_descriptor_proto ?? []).map((b) =>
    fromBinary(FileDescriptorProtoSchema, b),
  );
};

/** What a strict client does: the file of a symbol, then every import fetched by its file name. */
async function fetchWithImports(symbol: string): Promise<Map<string, FileDescriptorProto>> {
  const files = new Map<string, FileDescriptorProto>();
  for (const f of decode(await reflect({ file_containing_symbol: symbol }))) files.set(f.name, f);
  const queue = [...files.values()].flatMap((f) => f.dependency);
  while (queue.length > 0) {
    const name = queue.pop()!;
    if (files.has(name)) continue;
    const got = decode(await reflect({ file_by_filename: name }));
    expect(got[0]!.name).toBe(name);
    for (const f of got) {
      files.set(f.name, f);
      queue.push(...f.dependency);
    }
  }
  return files;
}

beforeAll(async () => {
  server = createGrpcServer({
    assemble: async (req) => {
      seen.push(req);
      return {
        response: stubResponse(req, { assembled_context: `context for ${req.query}`, tokens_used: 7 }),
        level: 'L0',
      };
    },
    logger: createLogger({ logLevel: 'silent' }),
    settings: { timeoutMs: 10_000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 },
  });
  const port = await server.bind('127.0.0.1:0');
  server.markServing();
  client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
});
afterAll(async () => {
  client?.close();
  await server?.drain(500);
});

describe('server reflection read by a strict client (@bufbuild/protobuf)', () => {
  it('lists the services', async () => {
    const res = await reflect({ list_services: '*' });
    const names = (res.list_services_response?.service ?? []).map((s) => s.name).sort();
    expect(names).toEqual(['grpc.health.v1.Health', 'ibex.context.v1.ContextAssemblyService']);
  });

  it('serves the real file names and imports, and type_name only on message/enum fields', async () => {
    const files = await fetchWithImports('ibex.context.v1.ContextAssemblyService');
    expect([...files.keys()].sort()).toEqual([
      'google/protobuf/timestamp.proto',
      'ibex/auth/v1/principal_context.proto',
      'ibex/context/v1/context.proto',
    ]);
    expect(files.get('ibex/context/v1/context.proto')!.dependency).toEqual([
      'ibex/auth/v1/principal_context.proto',
    ]);
    expect(files.get('ibex/auth/v1/principal_context.proto')!.dependency).toEqual([
      'google/protobuf/timestamp.proto',
    ]);
    const timestamp = files.get('google/protobuf/timestamp.proto')!.messageType[0]!;
    expect(timestamp.field.map((f) => [f.name, f.type, f.typeName])).toEqual([
      ['seconds', 3, ''],
      ['nanos', 5, ''],
    ]);
    for (const file of files.values()) {
      const walk = (m: FileDescriptorProto['messageType'][number]) => {
        for (const f of m.field) {
          const isRef = f.type === 11 || f.type === 14;
          // bufbuild reports an absent string as ''; presence is what strict runtimes check.
          expect(f.typeName !== '', `${m.name}.${f.name}`).toBe(isRef);
          if (isRef) expect(f.typeName.startsWith('.')).toBe(true);
          expect(f.extendee).toBe('');
        }
        m.nestedType.forEach(walk);
      };
      file.messageType.forEach(walk);
    }
  });

  it('links the files into a registry and calls AssembleContext with dynamic messages', async () => {
    const files = await fetchWithImports('ibex.context.v1.ContextAssemblyService');
    const registry = createFileRegistry(files.get('ibex/context/v1/context.proto')!, (name) =>
      files.get(name),
    );
    const service = registry.getService('ibex.context.v1.ContextAssemblyService')!;
    const rpc = service.methods.find((m) => m.name === 'AssembleContext')!;
    const input = rpc.input as DescMessage;
    const output = rpc.output as DescMessage;
    const request = create(input, {
      orgId: ORG,
      agentId: AGENT,
      model: 'gpt-4o',
      query: 'reflected',
      recentMessages: [{ role: 'user', content: 'hi' }],
    } as never);
    const answer = await new Promise<Message>((resolve, reject) => {
      client.makeUnaryRequest(
        `/${service.typeName}/${rpc.name}`,
        (m: Message) => Buffer.from(toBinary(input, m)),
        (b: Buffer) => fromBinary(output, b),
        request,
        new Metadata(),
        { deadline: Date.now() + 5000 },
        (err, value) => (err ? reject(err) : resolve(value as Message)),
      );
    });
    const res = answer as unknown as { assembledContext: string; tokensUsed: number; scoreSchema: string };
    expect(res.assembledContext).toBe('context for reflected');
    expect(res.tokensUsed).toBe(7);
    expect(res.scoreSchema).toBe('interim_v1');
    expect(seen.at(-1)!.recentMessages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it("rejects what proto-loader's own descriptors would have served (the bug this replaces)", () => {
    const protos = (
      packageDefinition['ibex.auth.v1.PrincipalContext'] as { fileDescriptorProtos: Buffer[] }
    ).fileDescriptorProtos.map((b) => fromBinary(FileDescriptorProtoSchema, b));
    expect(protos.map((p) => p.name).sort()).toEqual([
      'google_protobuf.proto',
      'ibex_auth_v1.proto',
      'ibex_context_v1.proto',
    ]);
    const byName = new Map(protos.map((p) => [p.name, p]));
    const auth = protos.find((p) => p.package === 'ibex.auth.v1')!;
    expect(() => createFileRegistry(auth, (n) => byName.get(n))).toThrow(
      /type_name google\.protobuf\.Timestamp not found/,
    );
  });
});
