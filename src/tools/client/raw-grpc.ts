/**
 * The load driver's transport: unary gRPC calls as pre-encoded request frames over one
 * `node:http2` session per connection, without a grpc-js client. A grpc-js call costs the driver about
 * 0.4–1.7 ms CPU (channel, filters, Metadata objects, protobuf both ways); here a call is one HTTP/2
 * stream: headers, one DATA frame written from a cached buffer, the status read from the trailers and the
 * level from the response headers, the response body kept only when asked (grpc-frames.ts reads it).
 * Each call's end says what ended it ({@link CallEnd}), so callers never read status text.
 */

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
 * What ended a call, as the transport saw it. Callers classify outcomes by this and the status code,
 * never by status text.
 * - `server`: the server sent a grpc-status (in the trailers, or a trailers-only answer);
 * - `timer`: the caller's own deadline timer ({@link RawCall.expire});
 * - `cancel`: the caller gave up on the call ({@link RawCall.cancel}, the end of a load run);
 * - `connection`: no usable connection: never connected, lost, refused stream or GOAWAY;
 * - `stream`: the stream ended without a grpc-status (reset by the server, or a malformed answer).
 */
export type CallEnd = 'server' | 'timer' | 'cancel' | 'connection' | 'stream';

/** The end of one raw call. `body` is the response message without its prefix (null when none). */
export interface RawOutcome {
  /** gRPC status code (0 = OK). */
  code: number;
  /** `grpc-message`, percent-decoded, or the transport's own words ('' when absent). For people only. */
  details: string;
  /** What ended the call. */
  end: CallEnd;
  /** `x-ibex-context-level` from the response headers (or a trailers-only answer), '' when absent. */
  level: string;
  /** Response bytes received as DATA (prefix included). */
  bytes: number;
  /**
   * The response message (prefix stripped), kept only when the caller asked for it. Valid until
   * {@link CallSink.done} returns: a transport may read into its memory again afterwards (the `frames`
   * transport does), so copy it to keep it.
   */
  body: Buffer | null;
}

/** Options of {@link RawChannel.call}. */
export interface RawCallOptions {
  /** Sent as `grpc-timeout`, ms. The caller enforces it on its side too ({@link RawCall.expire}). */
  timeoutMs: number;
  /** Keep the response message for decoding. */
  keepBody: boolean;
}

/** Receives the end of a call: an object, so a caller that tracks calls needs no closure per call. */
export interface CallSink {
  /** Runs exactly once per call, never inside {@link RawChannel.call}. */
  done(outcome: RawOutcome): void;
}

/** A call in flight. Both methods are no-ops once the call has ended. */
export interface RawCall {
  /** The caller's deadline passed: ends the call DEADLINE_EXCEEDED (`end: 'timer'`), resets the stream. */
  expire(): void;
  /** The caller gives up: ends the call CANCELLED (`end: 'cancel'`), resets the stream. */
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

/**
 * Receive windows, bytes: the defaults (64 KiB) make the client send a WINDOW_UPDATE every few 13 KB
 * answers; a large window cuts those writes to one per many calls (the driver's CPU per call).
 */
const STREAM_WINDOW = 1 << 20;
const SESSION_WINDOW = 16 << 20;

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

/** Where a stream's listeners (shared functions, not closures per call) find their call. */
const CALL = Symbol('rawCall');
type CallStream = ClientHttp2Stream & { [CALL]: H2Call };

/**
 * What the driver's transports share per call (h2 here): the outcome under way
 * (level, bytes, the kept body's chunks) and the one way a call ends, {@link RawCallState.finish}.
 */
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

  /** Ends the call once: the sink gets the outcome, the body being the one message of the kept chunks. */
  finish(code: number, details: string, end: CallEnd): void {
    if (this.ended) return;
    this.ended = true;
    const chunks = this.chunks;
    let body: Buffer | null = null;
    if (chunks !== null && chunks.length > 0) {
      const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      // One unary response: one length-prefixed message.
      if (all.length >= 5) body = all.subarray(5, 5 + all.readUInt32BE(1));
    }
    this.chunks = null;
    this.sink.done({ code, details, end, level: this.level, bytes: this.bytes, body });
    this.afterDone();
  }

  /** Runs once the sink has the outcome (the body's bytes may be reused from then on). */
  protected afterDone(): void {}

  /** Resets the call's stream, if it has one, with CANCEL. */
  protected abstract resetStream(): void;

  expire(): void {
    // Worded like grpc-js's client timer; the words are for people, `end` is for code.
    this.abandon(DEADLINE_EXCEEDED, `Deadline exceeded after ${this.timeoutMs} ms (driver)`, 'timer');
  }

  cancel(): void {
    this.abandon(CANCELLED, 'cancelled by the driver at the end of the run', 'cancel');
  }

  /** Ends a call that cannot start, on the next turn of the loop (never inside a transport's `call`). */
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

/** One call's state; the stream's listeners below end it through {@link H2Call.finish}. */
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

  /**
   * Starts one AssembleContext call with a pre-encoded `frame`; `sink.done` runs exactly once.
   * Never throws: a dead connection ends the call with UNAVAILABLE (`end: 'connection'`).
   */
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

  /** Closes the connection; streams still open are reset. */
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
