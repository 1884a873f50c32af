/**
 * AssembleContext on raw bytes: request bytes encoded by hand, a unary call of them (in this thread or in a
 * worker), and an upload over plain `node:http2` that sends only a prefix of its message.
 */
import http2 from 'node:http2';
import { Worker } from 'node:worker_threads';
import { Client, credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import type { CallOutcome } from '../../src/tools/client/context-client.js';
import { type AssembleContextResponse, contextServiceDefinition } from '../../src/wire/proto.js';
import type { TestClient } from './grpc-client.js';

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
