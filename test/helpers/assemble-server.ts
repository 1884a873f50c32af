/**
 * A real gRPC server on 127.0.0.1 whose pipeline is a test's own `assemble` (the service's transport,
 * validation and status mapping around a test double), SERVING at once. Every server started here is
 * drained after each test of the file that imports this module.
 */
import { afterEach } from 'vitest';
import { type AssembleFn, createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import { createLogger } from '../../src/telemetry/logger.js';

/** The servers started by {@link startAssembleServer} and not yet drained. */
export const servers: GrpcServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.drain(500)));
});

/**
 * Starts the server: 10 s request timeout, 4 MiB messages, 16 KiB metadata, a silent logger; SERVING
 * unless `serving` is false (health checks then answer NOT_SERVING until `markServing()`).
 * @returns its `127.0.0.1:<port>` address and the server.
 */
export async function startAssembleServer(
  assemble: AssembleFn,
  { serving = true } = {},
): Promise<{ addr: string; grpc: GrpcServer }> {
  const grpc = createGrpcServer({
    assemble,
    logger: createLogger({ logLevel: 'silent' }),
    settings: { timeoutMs: 10_000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 },
  });
  const port = await grpc.bind('127.0.0.1:0');
  if (serving) grpc.markServing();
  servers.push(grpc);
  return { addr: `127.0.0.1:${port}`, grpc };
}
