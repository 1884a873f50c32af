/**
 * Helpers of the wire isolation tests (issue 9): raw request bytes, a raw-bytes gRPC call, a memory HTTP
 * service fixture, and a quiet caller of another org running alongside a heavy call.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import protobuf from 'protobufjs/minimal.js';
import { expect } from 'vitest';
import type { CallOutcome } from '../../src/client/context-client.js';
import type { MemoryRow } from '../../src/retrieval/embedded-store.js';
import { type AssembleContextResponse, contextServiceDefinition } from '../../src/server/proto.js';
import type { TestClient } from '../helpers/grpc-client.js';

const ASSEMBLE = contextServiceDefinition.AssembleContext!;

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

/** Sends raw request bytes to AssembleContext and decodes the answer. */
export function assembleRaw(
  addr: string,
  bytes: Buffer,
  deadlineMs: number,
): Promise<CallOutcome<AssembleContextResponse>> {
  const client = new Client(addr, credentials.createInsecure(), { 'grpc.max_send_message_length': -1 });
  return new Promise((resolve) => {
    let md = new Metadata();
    client
      .makeUnaryRequest(
        ASSEMBLE.path,
        (b: Buffer) => b,
        (b: Buffer) => ASSEMBLE.responseDeserialize(b) as AssembleContextResponse,
        bytes,
        new Metadata(),
        { deadline: Date.now() + deadlineMs },
        (err: ServiceError | null, response?: AssembleContextResponse) => {
          client.close();
          resolve({
            response: err ? null : (response ?? null),
            metadata: md,
            status: err
              ? { code: err.code, details: err.details, metadata: err.metadata }
              : { code: status.OK, details: '', metadata: new Metadata() },
          });
        },
      )
      .on('metadata', (m: Metadata) => {
        md = m;
      });
  });
}

/** One memory-service hit (SPEC §4.1 wire): a stored memory without its time, and its similarity. */
export type FixtureHit = Omit<MemoryRow, 'created_at'> & { similarity: number };

/** A memory HTTP service answering hot and cold from `hitsFor(agent)` after `delayFor(agent)` ms. */
export async function startMemoryFixture(
  hitsFor: (agent: string) => FixtureHit[],
  delayFor: (agent: string) => number,
): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString('utf8');
    });
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const agent =
        url.pathname === '/v1/memories/hot'
          ? (url.searchParams.get('agent_id') ?? '')
          : String((JSON.parse(body || '{}') as { agent_id?: string }).agent_id ?? '');
      const results = hitsFor(agent).map((h, i) => ({
        memory: {
          id: h.id,
          org_id: h.org_id,
          agent_id: h.agent_id,
          content: h.content,
          category: h.category,
          confidence: h.confidence,
        },
        similarity: h.similarity,
        rank: i + 1,
        source: url.pathname === '/v1/memories/hot' ? 'hot' : 'vector',
      }));
      setTimeout(() => {
        if (res.destroyed) return;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ data: { results } }));
      }, delayFor(agent));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * Runs `heavy` while a quiet caller of another org sends `calls` small requests one after another, and
 * asserts every quiet call is OK at L0 within its (generous: the machine is shared) deadline.
 * @returns the heavy call's result.
 */
export async function withQuietCaller<T>(
  client: TestClient,
  quietRequest: () => Parameters<TestClient['assemble']>[0],
  heavy: () => Promise<T>,
  calls = 4,
  deadlineMs = 5_000,
): Promise<T> {
  const quiet = (async () => {
    const outcomes: CallOutcome<AssembleContextResponse>[] = [];
    for (let i = 0; i < calls; i++) outcomes.push(await client.assemble(quietRequest(), { deadlineMs }));
    return outcomes;
  })();
  const [result, outcomes] = await Promise.all([heavy(), quiet]);
  for (const o of outcomes) {
    expect(o.status.code).toBe(status.OK);
    expect(o.response!.degradation.level).toBe('L0');
  }
  return result;
}
