/**
 * The `frames` transport's channel (issue 10): one HTTP/2 connection to the service over a plain
 * `net.Socket` (or a TLS socket with ALPN `h2`), spoken by frames-connection.ts, reopened at most every
 * 100 ms after it is lost or the server sent GOAWAY — the same contract as {@link RawChannel}, at a
 * fraction of `node:http2`'s CPU per call.
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';
import type { ConnectionOptions } from './context-client.js';
import { FramesCall } from './frames-call.js';
import { H2Connection } from './frames-connection.js';
import { ASSEMBLE_PATH } from './grpc-frames.js';
import { literalHeaderBlock } from './h2-codec.js';
import { type CallSink, isIp, type RawCall, type RawCallOptions, splitHostPort } from './raw-grpc.js';

/** After a lost connection, at most one reconnect attempt per this many ms (calls in between fail fast). */
const RECONNECT_MS = 100;
/** Size of a plain connection's read buffer, bytes (what one read can return). */
const READ_BUFFER_BYTES = 64 * 1024;

/** One HTTP/2 connection to the service for the load driver, reopened after it is lost. */
export class FramesChannel {
  private conn!: H2Connection;
  /** Connections replaced while their streams were still finishing (after GOAWAY): closed with ours. */
  private retired: H2Connection[] = [];
  private connectedAt = 0;
  private readonly fields: [string, string][];
  /** Request header blocks per grpc-timeout value: encoded once, not per call. */
  private readonly blockByTimeout = new Map<number, Buffer>();
  private readonly dial: () => H2Connection;

  /**
   * Opens the connection (lazily: {@link FramesChannel.ready} waits for the server's SETTINGS).
   * @param conn address, TLS and bearer token; the token goes only into the request headers (never
   *   indexed, RFC 7541 §6.2.3).
   */
  constructor(conn: ConnectionOptions) {
    const t = conn.tls;
    const [host, port] = splitHostPort(conn.addr);
    const bareHost = host.replace(/^\[(.*)\]$/, '$1');
    const authority = typeof t === 'object' && t.serverName ? t.serverName : host;
    if (t) {
      const o = t === true ? {} : t;
      this.dial = () => {
        let socket: tls.TLSSocket;
        return new H2Connection(
          (onRead) => {
            socket = tls.connect({
              host: bareHost,
              port: Number(port),
              ca: o.ca,
              cert: o.cert,
              key: o.key,
              servername: o.serverName ?? (isIp(host) ? undefined : host),
              ALPNProtocols: ['h2'],
            });
            return socket.on('data', onRead);
          },
          'secureConnect',
          () =>
            socket.alpnProtocol === 'h2'
              ? null
              : new Error(`the server did not agree to HTTP/2 (ALPN ${socket.alpnProtocol || 'none'})`),
        );
      };
    } else {
      // Reads land in one buffer per connection (`onread`), not a fresh 64 KiB allocation per read; what a
      // call still needs after a read goes to its connection's BodyArena (issue 10: the driver's CPU).
      this.dial = () => {
        const buffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
        return new H2Connection(
          (onRead) =>
            net.connect({
              host: bareHost,
              port: Number(port),
              onread: {
                buffer,
                callback: (n) => {
                  onRead(buffer.subarray(0, n));
                  return true;
                },
              },
            }),
          'connect',
        );
      };
    }
    this.fields = [
      [':method', 'POST'],
      [':scheme', t ? 'https' : 'http'],
      [':path', ASSEMBLE_PATH],
      [':authority', `${authority}:${port}`],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
      ['user-agent', 'ibex-context-load'],
    ];
    if (conn.token) this.fields.push(['authorization', `Bearer ${conn.token}`]);
    this.connect();
  }

  private connect(): void {
    if (this.conn !== undefined) {
      this.retired = this.retired.filter((c) => c.error === null);
      if (this.conn.error === null) this.retired.push(this.conn);
    }
    this.conn = this.dial();
    this.connectedAt = performance.now();
  }

  /**
   * Resolves once the connection is up (the server's SETTINGS arrived); rejects naming `addr` when it is
   * not within `timeoutMs`.
   * @throws Error `cannot connect to <addr> within <ms> ms: <reason>`.
   */
  ready(addr: string, timeoutMs: number): Promise<void> {
    const conn = this.conn;
    return new Promise((resolve, reject) => {
      const fail = (reason: string) => {
        clearTimeout(timer);
        conn.close();
        reject(new Error(`cannot connect to ${addr} within ${timeoutMs} ms: ${reason}`));
      };
      const timer = setTimeout(() => fail('timed out'), timeoutMs);
      conn.whenReady().then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        (err: Error) => fail(err.message),
      );
    });
  }

  private blockFor(timeoutMs: number): Buffer {
    const ms = Math.ceil(timeoutMs);
    let block = this.blockByTimeout.get(ms);
    if (block === undefined) {
      block = literalHeaderBlock([...this.fields, ['grpc-timeout', `${ms}m`]], new Set(['authorization']));
      this.blockByTimeout.set(ms, block);
    }
    return block;
  }

  /**
   * Starts one AssembleContext call with a pre-encoded `frame`; `sink.done` runs exactly once, never
   * inside `call`. Never throws: a dead connection ends the call with UNAVAILABLE (`end: 'connection'`).
   */
  call(frame: Buffer, opts: RawCallOptions, sink: CallSink): RawCall {
    const call = new FramesCall(frame, this.blockFor(opts.timeoutMs), opts.timeoutMs, opts.keepBody, sink);
    if (!this.conn.usable && performance.now() - this.connectedAt >= RECONNECT_MS) this.connect();
    const conn = this.conn;
    if (!conn.usable) return call.failSoon(`connection lost: ${conn.error?.message ?? 'GOAWAY'}`);
    conn.open(call);
    return call;
  }

  /** Closes the connection; calls still open end UNAVAILABLE (`connection`). */
  close(): void {
    for (const c of this.retired) c.close();
    this.conn.close();
  }
}
