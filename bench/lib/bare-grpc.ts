/**
 * The benches' bare gRPC server: grpc-js with the service's definition and `grpc.enable_channelz: 0` (as
 * grpc-server.ts has it), answering every AssembleContext at once with one canned LoCoMo-sized answer
 * (bench/lib/canned-rows.ts), in a child process started with the service's node flags. No validation, no
 * retrieval, no thread: what a call costs, and how late it is, before any code of the service's runs.
 * `bench:floor` measures its CPU per call, `bench:isolation` its p99 alone and beside busy cores.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { Server, ServerCredentials, type ServiceDefinition, type sendUnaryData } from '@grpc/grpc-js';
import { SERVICE_NODE_FLAGS } from '../../src/config/node-flags.js';
import { type AssembleContextResponse, contextServiceDefinition } from '../../src/wire/proto.js';
import { cannedAnswer } from './canned-rows.js';
import { projectPath } from './paths.js';

/**
 * The two forms: `codec` decodes each request and encodes the answer with the proto-loader serializers
 * (what a plain grpc-js service pays), `bytes` skips both (request bytes handed over as they are, the
 * answer's bytes encoded once).
 */
export const GRPC_FORMS = ['codec', 'bytes'] as const;
export type GrpcForm = (typeof GRPC_FORMS)[number];

/** The compiled child entry (bench/bare-grpc-server.ts; `npm run build` first). */
const ENTRY = projectPath('dist/bench/bare-grpc-server.js');

/**
 * Child side: serves on 127.0.0.1, port 0, and sends the port to the parent; exits once the parent is
 * gone (killed, crashed), since it has nobody to serve then.
 */
export function serveBareGrpc(form: GrpcForm): void {
  const answer = cannedAnswer();
  const assemble = contextServiceDefinition.AssembleContext!;
  let definition: ServiceDefinition = { AssembleContext: assemble };
  if (form === 'bytes') {
    const bytes = assemble.responseSerialize(answer);
    definition = {
      AssembleContext: {
        ...assemble,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: () => bytes,
      },
    };
  }
  const server = new Server({ 'grpc.enable_channelz': 0 });
  server.addService(definition, {
    AssembleContext: (_call: unknown, callback: sendUnaryData<AssembleContextResponse>) =>
      callback(null, answer),
  });
  process.on('disconnect', () => process.exit(0));
  server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, port) => {
    if (err) throw err;
    process.send?.({ port });
  });
}

/** A running bare server: its port on 127.0.0.1 and its process (kill it when done). */
export interface BareGrpcServer {
  port: number;
  child: ChildProcess;
}

/**
 * Starts the bare server in a child with `nodeFlags`, by default the service's (heap floor, V8 helper
 * threads: the same GC and helpers as `serve`).
 * @throws Error if the child exits before it listens.
 */
export async function startBareGrpcServer(
  form: GrpcForm,
  nodeFlags: readonly string[] = SERVICE_NODE_FLAGS,
): Promise<BareGrpcServer> {
  const child = fork(ENTRY, [form], { stdio: 'inherit', execArgv: [...nodeFlags] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`the ${form} gRPC server exited (code ${code})`)));
  });
  return { port, child };
}
