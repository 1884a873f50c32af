/**
 * The load driver's transport (issue 10): unary gRPC calls as pre-encoded request frames over one
 * `node:http2` session per connection, without a grpc-js client. A grpc-js call costs the driver about
 * 0.4–1.7 ms CPU (channel, filters, Metadata objects, protobuf both ways); here a call is one HTTP/2
 * stream: headers, one DATA frame written from a cached buffer, the status read from the trailers and the
 * level from the response headers. The body is decoded only on request ({@link summarizeResponse} walks
 * the protobuf bytes for a few counters without building the response object).
 */

import http2, { type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { performance } from 'node:perf_hooks';
import protobuf from 'protobufjs';
import type { AssembleContextRequestInput } from '../server/proto.js';
import { LEVEL_HEADER } from '../wire-headers.js';
import { ASSEMBLE_METHOD, type ConnectionOptions } from './context-client.js';

const { Reader } = protobuf;

/** HTTP/2 path of AssembleContext (SPEC §2). */
export const ASSEMBLE_PATH = ASSEMBLE_METHOD.path;

/** gRPC status codes used by the transport itself. */
const CANCELLED = 1;
const UNKNOWN = 2;
const DEADLINE_EXCEEDED = 4;
const UNAVAILABLE = 14;
const INTERNAL = 13;

/**
 * One request as it goes on the wire: the 5-byte gRPC message prefix (uncompressed flag + big-endian
 * length) and the protobuf bytes.
 */
export function encodeRequestFrame(req: AssembleContextRequestInput): Buffer {
  const body = ASSEMBLE_METHOD.requestSerialize(req);
  const frame = Buffer.allocUnsafe(5 + body.length);
  frame[0] = 0;
  frame.writeUInt32BE(body.length, 1);
  body.copy(frame, 5);
  return frame;
}

/** Frames of every request object encoded so far in this process (the objects own them: a WeakMap). */
const FRAMES = new WeakMap<object, Buffer>();

/**
 * {@link encodeRequestFrame} cached by request object: sources hand out the same objects again, so each
 * distinct request is encoded once per process, not once per run (bench steps reuse one source).
 */
export function frameCache(): FrameCache {
  const cache = FRAMES;
  const frameOf = (req: AssembleContextRequestInput) => {
    let frame = cache.get(req);
    if (frame === undefined) {
      frame = encodeRequestFrame(req);
      cache.set(req, frame);
    }
    return frame;
  };
  return Object.assign(frameOf, {
    prepare: (requests: readonly AssembleContextRequestInput[]) => {
      for (const r of requests) frameOf(r);
    },
  });
}

/** {@link frameCache}'s lookup, plus `prepare` to encode a known list up front (outside the measurement). */
export type FrameCache = ((req: AssembleContextRequestInput) => Buffer) & {
  prepare(requests: readonly AssembleContextRequestInput[]): void;
};

/** The end of one raw call. `body` is the response message without its prefix (null when none). */
export interface RawOutcome {
  /** gRPC status code (0 = OK). */
  code: number;
  /** `grpc-message`, percent-decoded ('' when absent). */
  details: string;
  /** `x-ibex-context-level` from the response headers (or a trailers-only answer), '' when absent. */
  level: string;
  /** Response bytes received as DATA (prefix included). */
  bytes: number;
  /** The response message (prefix stripped), kept only when the caller asked for it. */
  body: Buffer | null;
}

/** Options of {@link RawChannel.call}. */
export interface RawCallOptions {
  /** Sent as `grpc-timeout`, ms. The caller enforces it on its side too ({@link RawCall.expire}). */
  timeoutMs: number;
  /** Keep the response message for decoding. */
  keepBody: boolean;
}

/** A call in flight. */
export interface RawCall {
  /** Ends the call now with DEADLINE_EXCEEDED (or `code`) and resets the stream; no-op once ended. */
  expire(code?: number, details?: string): void;
}

function decodeGrpcMessage(raw: unknown): string {
  if (typeof raw !== 'string' || raw === '') return '';
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

function headerString(v: string | string[] | undefined): string {
  return Array.isArray(v) ? (v[0] ?? '') : (v ?? '');
}

/** After a lost connection, at most one reconnect attempt per this many ms (calls in between fail fast). */
const RECONNECT_MS = 100;

/** HTTP/2 RST_STREAM codes with a gRPC meaning (gRPC over HTTP/2, "Errors"). */
const RST_REFUSED_STREAM = 7;
const RST_CANCEL = 8;

/** Connection-level failures: the call never reached the service's handler (gRPC says UNAVAILABLE). */
const CONNECTION_ERRORS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ERR_HTTP2_GOAWAY_SESSION',
  'ERR_HTTP2_INVALID_SESSION',
  // A stream still pending when its session failed to connect: never sent.
  'ERR_HTTP2_STREAM_CANCEL',
]);

/** One HTTP/2 connection to the service, reopened (at most every 100 ms) after it is lost. */
export class RawChannel {
  private session!: ClientHttp2Session;
  private readonly baseHeaders: http2.OutgoingHttpHeaders;
  private closedError: Error | null = null;
  private connectedAt = 0;
  /** Request headers per grpc-timeout value: built once, not per call. */
  private readonly headersByTimeout = new Map<number, http2.OutgoingHttpHeaders>();
  private readonly open: () => ClientHttp2Session;

  /**
   * Opens the connection (lazily: {@link RawChannel.ready} waits for it).
   * @param conn address, TLS and bearer token; the token goes only into the request headers.
   */
  constructor(conn: ConnectionOptions) {
    const tls = conn.tls;
    const [host, port] = splitHostPort(conn.addr);
    const authority = typeof tls === 'object' && tls.serverName ? tls.serverName : host;
    if (tls) {
      const t = tls === true ? {} : tls;
      this.open = () =>
        http2.connect(`https://${host}:${port}`, {
          ca: t.ca,
          cert: t.cert,
          key: t.key,
          servername: t.serverName ?? (isIp(host) ? undefined : host),
          ALPNProtocols: ['h2'],
        });
    } else {
      this.open = () => http2.connect(`http://${host}:${port}`);
    }
    this.connect();
    this.baseHeaders = {
      ':method': 'POST',
      ':path': ASSEMBLE_PATH,
      ':authority': `${authority}:${port}`,
      'content-type': 'application/grpc',
      te: 'trailers',
      'user-agent': 'ibex-context-load',
    };
    if (conn.token) this.baseHeaders.authorization = `Bearer ${conn.token}`;
  }

  private connect(): void {
    const session = this.open();
    this.session = session;
    this.closedError = null;
    this.connectedAt = performance.now();
    session.on('error', (err) => {
      if (this.session === session) this.closedError = err;
    });
    session.on('close', () => {
      if (this.session === session) this.closedError ??= new Error('connection closed');
    });
  }

  /**
   * Resolves once the connection is up; rejects naming `addr` when it is not within `timeoutMs`.
   * @throws Error `cannot connect to <addr> within <ms> ms: <reason>`.
   */
  ready(addr: string, timeoutMs: number): Promise<void> {
    const s = this.session;
    if (this.closedError !== null || s.destroyed) {
      return Promise.reject(
        new Error(
          `cannot connect to ${addr} within ${timeoutMs} ms: ${this.closedError?.message ?? 'closed'}`,
        ),
      );
    }
    if (!s.connecting) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const fail = (reason: string) => {
        clearTimeout(timer);
        s.off('connect', ok);
        s.off('error', onError);
        s.destroy();
        reject(new Error(`cannot connect to ${addr} within ${timeoutMs} ms: ${reason}`));
      };
      const ok = () => {
        clearTimeout(timer);
        s.off('error', onError);
        resolve();
      };
      const onError = (err: Error) => fail(err.message);
      const timer = setTimeout(() => fail('timed out'), timeoutMs);
      s.once('connect', ok);
      s.once('error', onError);
    });
  }

  /**
   * Starts one AssembleContext call with a pre-encoded `frame`; `done` runs exactly once.
   * Never throws: a dead connection ends the call with UNAVAILABLE.
   */
  call(frame: Buffer, opts: RawCallOptions, done: (outcome: RawOutcome) => void): RawCall {
    let ended = false;
    let level = '';
    let bytes = 0;
    let chunks: Buffer[] | null = opts.keepBody ? [] : null;
    let stream: ClientHttp2Stream | undefined;
    const finish = (code: number, details: string) => {
      if (ended) return;
      ended = true;
      let body: Buffer | null = null;
      if (chunks !== null && chunks.length > 0) {
        const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
        // One unary response: one length-prefixed message.
        if (all.length >= 5) body = all.subarray(5, 5 + all.readUInt32BE(1));
      }
      chunks = null;
      done({ code, details, level, bytes, body });
    };
    // Worded like grpc-js's client timer, which the benches classify as the client's decision.
    const expire = (
      code = DEADLINE_EXCEEDED,
      details = `Deadline exceeded after ${opts.timeoutMs} ms (driver)`,
    ) => {
      if (ended) return;
      finish(code, details);
      if (stream && !stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
    };
    // A call that cannot start ends on the next turn of the loop, never inside `call`: a closed-loop
    // caller that starts its next call from `done` would otherwise recurse without bound.
    const dead = () => this.closedError !== null || this.session.destroyed || this.session.closed;
    if (dead() && performance.now() - this.connectedAt >= RECONNECT_MS) this.connect();
    if (dead()) {
      const reason = this.closedError?.message ?? 'closed';
      setImmediate(() => finish(UNAVAILABLE, `connection lost: ${reason}`));
      return { expire };
    }
    try {
      const ms = Math.ceil(opts.timeoutMs);
      let headers = this.headersByTimeout.get(ms);
      if (headers === undefined) {
        headers = { ...this.baseHeaders, 'grpc-timeout': `${ms}m` };
        this.headersByTimeout.set(ms, headers);
      }
      stream = this.session.request(headers);
    } catch (err) {
      const reason = (err as Error).message;
      setImmediate(() => finish(UNAVAILABLE, `cannot start a stream: ${reason}`));
      return { expire };
    }
    stream.on('response', (headers) => {
      level = headerString(headers[LEVEL_HEADER]);
      // A trailers-only answer (errors) carries the status in the headers.
      const st = headers['grpc-status'];
      if (st !== undefined) finish(Number(headerString(st)), decodeGrpcMessage(headers['grpc-message']));
    });
    stream.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      chunks?.push(chunk);
    });
    stream.on('trailers', (trailers) => {
      const st = trailers['grpc-status'];
      finish(
        st === undefined ? UNKNOWN : Number(headerString(st)),
        st === undefined ? 'no grpc-status in the trailers' : decodeGrpcMessage(trailers['grpc-message']),
      );
    });
    stream.on('error', (err: NodeJS.ErrnoException) => {
      const lost = CONNECTION_ERRORS.has(err.code ?? '') || stream?.rstCode === RST_REFUSED_STREAM;
      finish(lost ? UNAVAILABLE : INTERNAL, `${lost ? 'connection lost' : 'stream error'}: ${err.message}`);
    });
    stream.on('close', () => {
      const rst = stream?.rstCode ?? 0;
      const code = rst === RST_CANCEL ? CANCELLED : rst === RST_REFUSED_STREAM ? UNAVAILABLE : INTERNAL;
      finish(code, `stream closed (rst ${rst})`);
    });
    stream.end(frame);
    return { expire };
  }

  /** Closes the connection; streams still open are reset. */
  close(): void {
    if (!this.session.destroyed) this.session.destroy();
  }
}

function isIp(host: string): boolean {
  return /^[\d.]+$/.test(host) || host.includes(':');
}

/** `host:port`, `[v6]:port` or a grpc-js style `dns:///host:port` → host and port (default 443/80). */
export function splitHostPort(addr: string): [string, string] {
  const a = addr.replace(/^dns:\/{0,3}/, '');
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(a);
  if (v6) return [`[${v6[1]}]`, v6[2] ?? '443'];
  const i = a.lastIndexOf(':');
  if (i < 0) return [a, '443'];
  return [a.slice(0, i), a.slice(i + 1)];
}

/** What {@link summarizeResponse} reads from a response without decoding it into an object. */
export interface ResponseSummary {
  /** `memory_tokens` (field 7). */
  memoryTokens: number;
  /** Σ `token_estimate` over every `memories_used` row: the tokens of all scored candidates. */
  candidateTokens: number;
  /** `memories_used` rows. */
  candidates: number;
  /** Rows with `exclusion = "budget"`: the packer left them out for lack of room (SPEC §8). */
  budgetExcluded: number;
  /** `degradation.level` ('' when absent). */
  level: string;
}

const BUDGET = Buffer.from('budget');

/**
 * Walks the AssembleContextResponse bytes (proto/ibex/context/v1/context.proto) for the counters of
 * {@link ResponseSummary}, skipping the assembled text and every other field unread.
 * @throws Error from protobufjs on malformed bytes.
 */
export function summarizeResponse(body: Uint8Array): ResponseSummary {
  const out: ResponseSummary = {
    memoryTokens: 0,
    candidateTokens: 0,
    candidates: 0,
    budgetExcluded: 0,
    level: '',
  };
  const r = Reader.create(body);
  while (r.pos < r.len) {
    const tag = r.uint32();
    const field = tag >>> 3;
    if (field === 4) {
      const end = r.uint32() + r.pos;
      out.candidates++;
      while (r.pos < end) {
        const t = r.uint32();
        const f = t >>> 3;
        if (f === 8) {
          const len = r.uint32();
          const start = r.pos;
          r.skip(len);
          if (len === BUDGET.length && Buffer.from(body.buffer, body.byteOffset + start, len).equals(BUDGET))
            out.budgetExcluded++;
        } else if (f === 11) out.candidateTokens += r.int32();
        else r.skipType(t & 7);
      }
    } else if (field === 7) {
      out.memoryTokens = r.int32();
    } else if (field === 100) {
      const end = r.uint32() + r.pos;
      while (r.pos < end) {
        const t = r.uint32();
        if (t >>> 3 === 1) out.level = r.string();
        else r.skipType(t & 7);
      }
    } else {
      r.skipType(tag & 7);
    }
  }
  return out;
}
