// The load driver's transport: pre-encoded AssembleContext frames over one `node:http2` session per
// connection, no grpc-js client, so the driver's own CPU stays small. Why: see docs/design/load-driver.md.

import http2, { type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { performance } from 'node:perf_hooks';
import { LEVEL_HEADER } from '../../wire/wire-headers.js';
import type { ConnectionOptions } from './context-client.js';
import { ASSEMBLE_PATH } from './grpc-frames.js';

/** gRPC status codes the driver's transports give themselves. */
export const CANCELLED = 1;
export const UNKNOWN = 2;
export const DEADLINE_EXCEEDED = 4;
export const UNAVAILABLE = 14;
export const INTERNAL = 13;

/**
 * What ended a call; callers classify by this and the code, never by status text. `server`: a grpc-status
 * arrived; `timer`: {@link RawCall.expire}; `cancel`: {@link RawCall.cancel}; `connection`: no usable
 * connection (never connected, lost, refused stream, GOAWAY); `stream`: ended without a grpc-status.
 */
export type CallEnd = 'server' | 'timer' | 'cancel' | 'connection' | 'stream';

/** The end of one raw call. `body` is the response message without its prefix (null when none). */
export interface RawOutcome {
  code: number;
  /** `grpc-message`, percent-decoded, or the transport's own words; for people only. */
  details: string;
  end: CallEnd;
  /** `x-ibex-context-level` from the response headers, '' when absent. */
  level: string;
  bytes: number;
  /** The response message, when asked for; valid until {@link CallSink.done} returns (copy it to keep it). */
  body: Buffer | null;
}

export interface RawCallOptions {
  /** Sent as `grpc-timeout`, ms. The caller enforces it on its side too ({@link RawCall.expire}). */
  timeoutMs: number;
  keepBody: boolean;
}

/** Receives the end of a call: an object, so a caller that tracks calls needs no closure per call. */
export interface CallSink {
  done(outcome: RawOutcome): void;
}

/** A call in flight. Both methods are no-ops once the call has ended. */
export interface RawCall {
  /** Ends the call DEADLINE_EXCEEDED (`end: 'timer'`) and resets the stream. */
  expire(): void;
  /** Ends the call CANCELLED (`end: 'cancel'`) and resets the stream. */
  cancel(): void;
}

/** `grpc-message` percent-decoded (gRPC over HTTP/2, "Responses"); '' when absent. */
export function grpcMessage(raw: unknown): string {
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

// A large receive window cuts WINDOW_UPDATE writes (one every few answers at 64 KiB) to one per many calls.
const STREAM_WINDOW = 1 << 20;
const SESSION_WINDOW = 16 << 20;

/** HTTP/2 RST_STREAM codes with a gRPC meaning (gRPC over HTTP/2, "Errors"). */
const RST_REFUSED_STREAM = 7;
const RST_CANCEL = 8;

const CONNECTION_ERRORS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ERR_HTTP2_GOAWAY_SESSION',
  'ERR_HTTP2_INVALID_SESSION',
  // A stream still pending when its session failed to connect: never sent.
  'ERR_HTTP2_STREAM_CANCEL',
]);

// Stream listeners are shared functions, not closures per call; they find their call here.
const CALL = Symbol('rawCall');
type CallStream = ClientHttp2Stream & { [CALL]: H2Call };

/** What the transports share per call: the outcome under way and the one way a call ends, `finish`. */
export abstract class RawCallState implements RawCall {
  ended = false;
  level = '';
  bytes = 0;
  chunks: Buffer[] | null;

  constructor(
    protected readonly timeoutMs: number,
    keepBody: boolean,
    private readonly sink: CallSink,
  ) {
    this.chunks = keepBody ? [] : null;
  }

  finish(code: number, details: string, end: CallEnd): void {
    if (this.ended) return;
    this.ended = true;
    const chunks = this.chunks;
    let body: Buffer | null = null;
    if (chunks !== null && chunks.length > 0) {
      const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      if (all.length >= 5) body = all.subarray(5, 5 + all.readUInt32BE(1));
    }
    this.chunks = null;
    this.sink.done({ code, details, end, level: this.level, bytes: this.bytes, body });
    this.afterDone();
  }

  protected afterDone(): void {}

  protected abstract resetStream(): void;

  expire(): void {
    // Worded like grpc-js's client timer; the words are for people, `end` is for code.
    this.abandon(DEADLINE_EXCEEDED, `Deadline exceeded after ${this.timeoutMs} ms (driver)`, 'timer');
  }

  cancel(): void {
    this.abandon(CANCELLED, 'cancelled by the driver at the end of the run', 'cancel');
  }

  /** Ends a call that cannot start on the next turn of the loop (never inside `call`). */
  failSoon(details: string): this {
    setImmediate(() => this.finish(UNAVAILABLE, details, 'connection'));
    return this;
  }

  private abandon(code: number, details: string, end: CallEnd): void {
    if (this.ended) return;
    this.finish(code, details, end);
    this.resetStream();
  }
}

class H2Call extends RawCallState {
  stream: ClientHttp2Stream | null = null;

  protected resetStream(): void {
    const s = this.stream;
    if (s !== null && !s.destroyed) s.close(http2.constants.NGHTTP2_CANCEL);
  }
}

function onResponse(this: CallStream, headers: http2.IncomingHttpHeaders): void {
  const c = this[CALL];
  c.level = headerString(headers[LEVEL_HEADER]);
  // A trailers-only answer (errors) carries the status in the headers.
  const st = headers['grpc-status'];
  if (st !== undefined) c.finish(Number(headerString(st)), grpcMessage(headers['grpc-message']), 'server');
}

function onData(this: CallStream, chunk: Buffer): void {
  const c = this[CALL];
  c.bytes += chunk.length;
  c.chunks?.push(chunk);
}

function onTrailers(this: CallStream, trailers: http2.IncomingHttpHeaders): void {
  const st = trailers['grpc-status'];
  if (st === undefined) this[CALL].finish(UNKNOWN, 'no grpc-status in the trailers', 'stream');
  else this[CALL].finish(Number(headerString(st)), grpcMessage(trailers['grpc-message']), 'server');
}

function onError(this: CallStream, err: NodeJS.ErrnoException): void {
  const lost = CONNECTION_ERRORS.has(err.code ?? '') || this.rstCode === RST_REFUSED_STREAM;
  if (lost) this[CALL].finish(UNAVAILABLE, `connection lost: ${err.message}`, 'connection');
  else this[CALL].finish(INTERNAL, `stream error: ${err.message}`, 'stream');
}

function onClose(this: CallStream): void {
  const rst = this.rstCode ?? 0;
  const c = this[CALL];
  if (rst === RST_REFUSED_STREAM) c.finish(UNAVAILABLE, `stream refused (rst ${rst})`, 'connection');
  else c.finish(rst === RST_CANCEL ? CANCELLED : INTERNAL, `stream closed (rst ${rst})`, 'stream');
}

/** One HTTP/2 connection to the service, reopened (at most every 100 ms) after it is lost. */
export class RawChannel {
  private session!: ClientHttp2Session;
  private readonly baseHeaders: http2.OutgoingHttpHeaders;
  private closedError: Error | null = null;
  private connectedAt = 0;
  private readonly headersByTimeout = new Map<number, http2.OutgoingHttpHeaders>();
  private readonly open: () => ClientHttp2Session;

  /** Opens the connection lazily; the bearer token goes only into the request headers. */
  constructor(conn: ConnectionOptions) {
    const tls = conn.tls;
    const [host, port] = splitHostPort(conn.addr);
    const authority = typeof tls === 'object' && tls.serverName ? tls.serverName : host;
    const settings = { initialWindowSize: STREAM_WINDOW };
    if (tls) {
      const t = tls === true ? {} : tls;
      this.open = () =>
        http2.connect(`https://${host}:${port}`, {
          ca: t.ca,
          cert: t.cert,
          key: t.key,
          servername: t.serverName ?? (isIp(host) ? undefined : host),
          ALPNProtocols: ['h2'],
          settings,
        });
    } else {
      this.open = () => http2.connect(`http://${host}:${port}`, { settings });
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
    session.once('connect', () => session.setLocalWindowSize(SESSION_WINDOW));
    session.on('error', (err) => {
      if (this.session === session) this.closedError = err;
    });
    session.on('close', () => {
      if (this.session === session) this.closedError ??= new Error('connection closed');
    });
  }

  /** Resolves once connected. @throws Error `cannot connect to <addr> within <ms> ms: <reason>`. */
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

  private dead(): boolean {
    return this.closedError !== null || this.session.destroyed || this.session.closed;
  }

  private headersFor(timeoutMs: number): http2.OutgoingHttpHeaders {
    const ms = Math.ceil(timeoutMs);
    let headers = this.headersByTimeout.get(ms);
    if (headers === undefined) {
      headers = { ...this.baseHeaders, 'grpc-timeout': `${ms}m` };
      this.headersByTimeout.set(ms, headers);
    }
    return headers;
  }

  /** Starts one call with a pre-encoded `frame`; never throws (no connection: UNAVAILABLE). */
  call(frame: Buffer, opts: RawCallOptions, sink: CallSink): RawCall {
    const call = new H2Call(opts.timeoutMs, opts.keepBody, sink);
    // A call that cannot start ends on the next turn of the loop, never inside `call`: a closed-loop
    // caller that starts its next call from `done` would otherwise recurse without bound.
    if (this.dead() && performance.now() - this.connectedAt >= RECONNECT_MS) this.connect();
    if (this.dead()) return call.failSoon(`connection lost: ${this.closedError?.message ?? 'closed'}`);
    let stream: CallStream;
    try {
      stream = this.session.request(this.headersFor(opts.timeoutMs)) as CallStream;
    } catch (err) {
      return call.failSoon(`cannot start a stream: ${(err as Error).message}`);
    }
    stream[CALL] = call;
    call.stream = stream;
    stream.on('response', onResponse);
    stream.on('data', onData);
    stream.on('trailers', onTrailers);
    stream.on('error', onError);
    stream.on('close', onClose);
    stream.end(frame);
    return call;
  }

  close(): void {
    if (!this.session.destroyed) this.session.destroy();
  }
}

/** True for an IPv4 address or a (bracketed) IPv6 one: no TLS server name then. */
export function isIp(host: string): boolean {
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
