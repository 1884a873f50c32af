/**
 * AssembleContext calls of hand-made request bytes, for the benches and tests of the on-the-wire decisions
 * (contract.md §11): a request of millions of empty history messages, and a unary call that sends bytes as
 * they are.
 */
import { type Client, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import protobuf from 'protobufjs/minimal.js';
import { contextServiceDefinition } from '../../src/wire/proto.js';

const PATH = contextServiceDefinition.AssembleContext!.path;

/**
 * Request bytes: org_id, agent_id, query, model (fields 2, 1, 4, 5, in field-number order) followed by
 * `emptyMessages` empty `recent_messages` entries (tag 0x42, length 0: two bytes each).
 */
export function decodeBomb(org: string, agent: string, emptyMessages: number): Buffer {
  const head = protobuf.Writer.create()
    .uint32(10)
    .string(agent)
    .uint32(18)
    .string(org)
    .uint32(34)
    .string('hello')
    .uint32(42)
    .string('gpt-4o')
    .finish();
  const out = Buffer.alloc(head.length + 2 * emptyMessages);
  out.set(head, 0);
  for (let i = head.length; i < out.length; i += 2) out[i] = 0x42;
  return out;
}

/**
 * One AssembleContext call of raw request bytes, 30 s deadline, the answer's bytes ignored.
 * @returns its status code and details, and when it ended (`performance.now()`, ms).
 */
export function sendRawAssemble(
  client: Client,
  bytes: Buffer,
): Promise<{ code: number; details: string; at: number }> {
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      PATH,
      (b: Buffer) => b,
      (b: Buffer) => b,
      bytes,
      new Metadata(),
      { deadline: Date.now() + 30_000 },
      (err: ServiceError | null) =>
        resolve({ code: err?.code ?? status.OK, details: err?.details ?? '', at: performance.now() }),
    );
  });
}
