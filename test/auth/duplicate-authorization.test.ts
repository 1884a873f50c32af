/**
 * Two `authorization` headers (a proxy appending its own token after the client's).
 * Node's HTTP/2 layer keeps only the first, so the call used to be served with whichever token came
 * first. It must be refused UNAUTHENTICATED, with a message saying why, before the pipeline runs.
 *
 * Node's HTTP/2 client refuses to send two `authorization` headers itself, so the test client is Node's
 * client over a socket that swaps the header block of its one HEADERS frame for a hand-encoded one
 * (HPACK literals without indexing, RFC 7541 §6.2.2): the rest of the exchange, the response included,
 * is ordinary HTTP/2 decoded by Node.
 */
import { createHash } from 'node:crypto';
import http2 from 'node:http2';
import net from 'node:net';
import { Duplex } from 'node:stream';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerAuthInterceptor, UNAUTHENTICATED_DETAILS } from '../../src/auth/bearer-interceptor.js';
import { parseTokenFile } from '../../src/auth/token-file.js';
import { createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import { restoreDuplicateAuthorization } from '../../src/grpc/patches/duplicate-authorization.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { contextServiceDefinition } from '../../src/wire/proto.js';
import { stubResponse } from '../helpers/stub-response.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const CLIENT_TOKEN = 'client-7d1e0c9b2a4f6e81';
const PROXY_TOKEN = 'proxy-3c5a7e9b1d2f4a60';
const PATH = '/ibex.context.v1.ContextAssemblyService/AssembleContext';

/** HPACK integer with an n-bit prefix (RFC 7541 §5.1). */
function hpackInt(value: number, prefixBits: number, firstByte = 0): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [firstByte | value];
  const out = [firstByte | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return out;
}

/** A header block of literal fields without indexing, new names, no Huffman coding. */
function headerBlock(fields: [string, string][]): Buffer {
  const bytes: number[] = [];
  for (const [name, value] of fields) {
    bytes.push(0x00);
    for (const s of [name, value]) {
      const b = Buffer.from(s, 'latin1');
      bytes.push(...hpackInt(b.length, 7), ...b);
    }
  }
  return Buffer.from(bytes);
}

/**
 * A socket to `port` that replaces the block of the first HEADERS frame Node's client writes with
 * `fields` (END_STREAM / END_HEADERS kept; Node sends no padding or priority on requests).
 */
function rewritingSocket(port: number, fields: [string, string][]): Duplex {
  const socket = net.connect(port, '127.0.0.1');
  let pending = Buffer.alloc(0);
  let prefaceLeft = 24;
  let swapped = false;
  const duplex = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      pending = Buffer.concat([pending, chunk]);
      const out: Buffer[] = [];
      if (prefaceLeft > 0) {
        const n = Math.min(prefaceLeft, pending.length);
        out.push(pending.subarray(0, n));
        pending = pending.subarray(n);
        prefaceLeft -= n;
      }
      while (prefaceLeft === 0 && pending.length >= 9) {
        const length = pending.readUIntBE(0, 3);
        if (pending.length < 9 + length) break;
        const frame = pending.subarray(0, 9 + length);
        pending = pending.subarray(9 + length);
        if (frame[3] === 0x1 && !swapped) {
          swapped = true;
          const block = headerBlock(fields);
          const head = Buffer.from(frame.subarray(0, 9));
          head.writeUIntBE(block.length, 0, 3);
          head[4] = frame[4]! & 0x05;
          out.push(head, block);
        } else {
          out.push(frame);
        }
      }
      if (out.length > 0) socket.write(Buffer.concat(out), cb);
      else cb();
    },
    final(cb) {
      socket.end(cb);
    },
  });
  socket.on('data', (d) => duplex.push(d));
  socket.on('end', () => duplex.push(null));
  socket.on('error', (err) => duplex.destroy(err));
  return duplex;
}

/** One AssembleContext call whose request carries `authorizations` as separate headers. */
async function callWithAuthorizations(
  port: number,
  authorizations: string[],
): Promise<{ grpcStatus: number; grpcMessage: string }> {
  const fields: [string, string][] = [
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', PATH],
    [':authority', `127.0.0.1:${port}`],
    ['content-type', 'application/grpc'],
    ['te', 'trailers'],
    ...authorizations.map((a): [string, string] => ['authorization', a]),
  ];
  const session = http2.connect(`http://127.0.0.1:${port}`, {
    createConnection: () => rewritingSocket(port, fields),
  });
  session.on('error', () => {});
  try {
    const message = contextServiceDefinition.AssembleContext!.requestSerialize({
      org_id: ORG,
      agent_id: AGENT,
      model: 'gpt-4o',
    });
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    // What Node encodes here is replaced on the wire by `fields`.
    const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc' });
    const meta: Record<string, string> = {};
    const take = (h: http2.IncomingHttpHeaders) => {
      for (const k of ['grpc-status', 'grpc-message']) if (typeof h[k] === 'string') meta[k] = h[k] as string;
    };
    req.on('response', take);
    req.on('trailers', take);
    req.on('data', () => {});
    req.end(frame);
    await new Promise<void>((resolve, reject) => {
      req.on('close', resolve);
      req.on('error', reject);
    });
    return {
      grpcStatus: Number(meta['grpc-status']),
      grpcMessage: decodeURIComponent(meta['grpc-message'] ?? ''),
    };
  } finally {
    session.close();
  }
}

describe('two authorization headers', () => {
  let grpc: GrpcServer;
  let port: number;
  let served = 0;

  beforeAll(async () => {
    const tokens = JSON.stringify({
      tokens: [
        {
          name: 'client',
          token_sha256: createHash('sha256').update(CLIENT_TOKEN).digest('hex'),
          orgs: ['*'],
        },
        { name: 'proxy', token: PROXY_TOKEN, orgs: ['*'] },
      ],
    });
    const logger = createLogger({ logLevel: 'silent' });
    grpc = createGrpcServer({
      assemble: async (req) => {
        served++;
        return { response: stubResponse(req), level: 'L0' };
      },
      logger,
      settings: { timeoutMs: 10_000, maxReceiveMessageBytes: 1 << 20, maxMetadataBytes: 16 * 1024 },
      interceptors: [bearerAuthInterceptor(parseTokenFile(tokens), logger)],
    });
    port = await grpc.bind('127.0.0.1:0');
    grpc.markServing();
  });
  afterAll(async () => {
    await grpc?.drain(1000);
  });

  it('one valid token on the raw wire ⇒ OK (the test client itself works)', async () => {
    const before = served;
    const r = await callWithAuthorizations(port, [`Bearer ${CLIENT_TOKEN}`]);
    expect(r.grpcStatus).toBe(status.OK);
    expect(served).toBe(before + 1);
  });

  it.each([
    ['client then proxy token, both valid', [`Bearer ${CLIENT_TOKEN}`, `Bearer ${PROXY_TOKEN}`]],
    ['a valid token then a wrong one', [`Bearer ${CLIENT_TOKEN}`, 'Bearer wrong-token-000000']],
    ['the same token twice', [`Bearer ${CLIENT_TOKEN}`, `Bearer ${CLIENT_TOKEN}`]],
  ])('%s ⇒ UNAUTHENTICATED "more than one authorization header", pipeline not run', async (_w, auths) => {
    const before = served;
    const r = await callWithAuthorizations(port, auths);
    expect(r.grpcStatus).toBe(status.UNAUTHENTICATED);
    expect(r.grpcMessage).toBe(UNAUTHENTICATED_DETAILS.duplicate);
    expect(served).toBe(before);
  });

  it('restoreDuplicateAuthorization puts back every value, and leaves a single one alone', () => {
    const two: http2.IncomingHttpHeaders = { authorization: 'Bearer a' };
    restoreDuplicateAuthorization(two, [
      ':path',
      '/x',
      'authorization',
      'Bearer a',
      'Authorization',
      'Bearer b',
    ]);
    expect(two.authorization).toEqual(['Bearer a', 'Bearer b']);
    const one: http2.IncomingHttpHeaders = { authorization: 'Bearer a' };
    restoreDuplicateAuthorization(one, ['authorization', 'Bearer a']);
    expect(one.authorization).toBe('Bearer a');
  });
});
