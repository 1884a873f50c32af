/**
 * Helpers of the wire isolation tests: raw request bytes, a raw-bytes gRPC call, a memory HTTP
 * service fixture, and a quiet caller of another org running alongside a heavy call.
 */
import http from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { Worker } from 'node:worker_threads';
import { Client, credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { expect } from 'vitest';
import type { MemoryRow } from '../../src/retrieval/sqlite/embedded-store.js';
import type { CallOutcome } from '../../src/tools/client/context-client.js';
import { type AssembleContextResponse, contextServiceDefinition } from '../../src/wire/proto.js';
import type { TestClient } from '../helpers/grpc-client.js';

const ASSEMBLE = contextServiceDefinition.AssembleContext!;

/** What {@link uploadPrefix} saw. */
export interface PrefixUploadOutcome {
  /** `grpc-status` and `grpc-message` of the answer, or null when none came before the deadline. */
  grpcStatus: number | null;
  grpcMessage: string | null;
  /** The RST_STREAM code the stream closed with (0: NO_ERROR). */
  rstCode: number;
}

/**
 * Opens an AssembleContext call on `session` (plain `node:http2`) whose gRPC frame announces all of
 * `message` and sends its first `sendBytes`; the request ends only when that is all of it.
 */
export function openUpload(
  session: http2.ClientHttp2Session,
  message: Buffer,
  sendBytes: number,
): http2.ClientHttp2Stream {
  const stream = session.request({
    ':method': 'POST',
    ':path': ASSEMBLE.path,
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  stream.on('error', () => {});
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(message.length, 1);
  const bytes = Buffer.concat([prefix, message.subarray(0, sendBytes)]);
  if (sendBytes >= message.length) stream.end(bytes);
  else stream.write(bytes);
  return stream;
}

/**
 * Waits for `stream`'s answer and its close; resets it with CANCEL (grpcStatus null) after `waitMs`.
 */
export function uploadOutcome(stream: http2.ClientHttp2Stream, waitMs: number): Promise<PrefixUploadOutcome> {
  const out: PrefixUploadOutcome = { grpcStatus: null, grpcMessage: null, rstCode: -1 };
  const read = (headers: http2.IncomingHttpHeaders) => {
    if (headers['grpc-status'] === undefined) return;
    out.grpcStatus = Number(headers['grpc-status']);
    out.grpcMessage = decodeURIComponent(String(headers['grpc-message'] ?? ''));
  };
  stream.on('response', read);
  stream.on('trailers', read);
  stream.resume();
  return new Promise((resolve) => {
    const timer = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), waitMs);
    stream.on('close', () => {
      clearTimeout(timer);
      out.rstCode = stream.rstCode ?? -1;
      resolve(out);
    });
  });
}

/**
 * An AssembleContext call on a connection of its own that sends only the first `sendBytes` of `message`
 * and never ends the request: an answer can only come from those bytes. Gives up after `waitMs`.
 */
export async function uploadPrefix(
  addr: string,
  message: Buffer,
  sendBytes: number,
  waitMs: number,
): Promise<PrefixUploadOutcome> {
  const session = http2.connect(`http://${addr}`);
  try {
    return await uploadOutcome(openUpload(session, message, sendBytes), waitMs);
  } finally {
    session.close();
  }
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

/** What {@link assembleInWorker} reports: the status, the level header and the undecoded answer. */
export interface RawOutcome {
  code: number;
  details: string;
  level: string;
  /** The response message bytes (empty unless OK). */
  body: Uint8Array;
}

// CommonJS, evaluated in the worker; `require` resolves from the project root (the tests' cwd).
const SENDER = `
const { parentPort, workerData } = require('node:worker_threads');
const { Client, credentials, Metadata } = require('@grpc/grpc-js');
const { addr, path, bytes, deadlineMs } = workerData;
const client = new Client(addr, credentials.createInsecure(), {
  'grpc.max_send_message_length': -1,
  'grpc.max_receive_message_length': -1,
});
let level = '';
const call = client.makeUnaryRequest(path, (b) => b, (b) => b, Buffer.from(bytes), new Metadata(),
  { deadline: Date.now() + deadlineMs }, (err, body) => {
    client.close();
    const out = err
      ? { code: err.code, details: err.details, level, body: new Uint8Array(0) }
      : { code: 0, details: '', level, body: new Uint8Array(body) };
    parentPort.postMessage(out, [out.body.buffer]);
  });
call.on('metadata', (m) => { level = String(m.get('x-ibex-context-level')[0] ?? ''); });
`;

/**
 * Sends raw request bytes to AssembleContext from a worker thread and returns the answer undecoded: the
 * client's work on a 10 MB request and answer (framing, copies) stays off the event loop that runs the
 * service under test in this process, so a concurrent small caller measures the service, not the client.
 */
export function assembleInWorker(addr: string, bytes: Uint8Array, deadlineMs: number): Promise<RawOutcome> {
  const worker = new Worker(SENDER, {
    eval: true,
    workerData: { addr, path: ASSEMBLE.path, bytes, deadlineMs },
  });
  return new Promise<RawOutcome>((resolve, reject) => {
    worker.once('message', (m: RawOutcome) => resolve(m));
    worker.once('error', reject);
  }).finally(() => worker.terminate());
}

/** Decodes an AssembleContext answer's bytes. */
export function decodeAnswer(body: Uint8Array): AssembleContextResponse {
  return ASSEMBLE.responseDeserialize(Buffer.from(body)) as AssembleContextResponse;
}

/** Encodes an AssembleContext request. */
export function encodeRequest(req: Parameters<TestClient['assemble']>[0]): Buffer {
  return ASSEMBLE.requestSerialize(req) as Buffer;
}

/** One memory-service hit (contract.md §4.1 wire): a stored memory without its time, and its similarity. */
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
