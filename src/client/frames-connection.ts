/**
 * One HTTP/2 connection of the `frames` transport (issue 10): the client side of RFC 9113 for unary gRPC
 * calls over a plain socket, without `node:http2`'s per-stream objects and callbacks. A call is one
 * HEADERS frame (a cached literal header block) and the cached request frame as DATA with END_STREAM;
 * the writes of one turn of the loop go out in one socket write. Answers are parsed frame by frame
 * (h2-codec.ts) and end calls under the same {@link CallEnd} contract as the `h2` transport (raw-grpc.ts).
 *
 * Flow control: our receive windows are the largest allowed, so the server never waits on us; our DATA
 * honours the server's stream and connection windows (queued until WINDOW_UPDATE or SETTINGS open them)
 * and its MAX_FRAME_SIZE; calls beyond its MAX_CONCURRENT_STREAMS wait for a stream to close.
 */
import type { Socket } from 'node:net';
import { LEVEL_HEADER } from '../wire-headers.js';
import {
  BodyArena,
  CANCELLED,
  type FramesCall,
  grpcMessage,
  INTERNAL,
  UNAVAILABLE,
  UNKNOWN,
} from './frames-call.js';
import {
  CLIENT_OPENING,
  CoalescingWriter,
  DEFAULT_MAX_FRAME,
  DEFAULT_WINDOW,
  dataOf,
  ErrorCode,
  Flag,
  FrameReader,
  FrameType,
  frame,
  GOAWAY_DONE,
  HEADER_BYTES,
  headerFragment,
  headersAndData,
  LAST_STREAM_ID,
  MAX_WINDOW,
  REFILL_AT,
  readSettings,
  rstStreamFrame,
  SETTINGS_ACK,
  windowUpdateFrame,
  writeFrameHeader,
} from './h2-codec.js';
import { HeaderDecoder } from './hpack-reader.js';
import type { CallEnd } from './raw-grpc.js';

/** One socket speaking HTTP/2 for {@link FramesCall}s; unusable for new calls once it failed or went away. */
export class H2Connection {
  /** Why the connection cannot be used any more (null while it can). */
  error: Error | null = null;
  /** The server sent GOAWAY: streams it took finish, no new ones start. */
  goingAway = false;
  private readonly reader = new FrameReader(this);
  private readonly hpack = new HeaderDecoder();
  private readonly streams = new Map<number, FramesCall>();
  /** Calls waiting for a stream (the server's SETTINGS or MAX_CONCURRENT_STREAMS), in call order. */
  private waiting: FramesCall[] = [];
  /** Streams whose DATA waits for window, in order. */
  private blocked: FramesCall[] = [];
  /** 0 until the server's first SETTINGS: no stream starts before we know its limits. */
  private maxStreams = 0;
  private streamWindow = DEFAULT_WINDOW;
  private connWindow = DEFAULT_WINDOW;
  private maxFrame = DEFAULT_MAX_FRAME;
  private unacked = 0;
  private nextId = 1;
  /** A header block that continues in CONTINUATION frames. */
  private partial: { id: number; endStream: boolean; parts: Buffer[] } | null = null;
  private settled = false;
  private readonly waiters: { ok: () => void; fail: (err: Error) => void }[] = [];

  private readonly socket: Socket;
  private readonly writer: CoalescingWriter;
  /** Calls that took views of the read being handled into their bodies. */
  private readonly holders: FramesCall[] = [];
  /** Where those views go when their call outlives the read. */
  readonly arena = new BodyArena();

  /**
   * Dials with `dial`, which hands every read to the function it is given (a view of a buffer that the
   * next read may reuse: what a call still needs after it is copied to the {@link BodyArena}), and speaks
   * HTTP/2 once `connectEvent` fires.
   * @param checkConnected a reason to give up on a connected socket (TLS without ALPN `h2`), or null.
   */
  constructor(
    dial: (onRead: (chunk: Buffer) => void) => Socket,
    connectEvent: 'connect' | 'secureConnect',
    checkConnected: () => Error | null = () => null,
  ) {
    const socket = dial((chunk) => {
      try {
        this.reader.feed(chunk);
      } catch (err) {
        this.fail(err as Error);
      }
      for (const c of this.holders) this.arena.keep(c);
      this.holders.length = 0;
    });
    this.socket = socket;
    this.writer = new CoalescingWriter(socket);
    socket.setNoDelay(true);
    socket.once(connectEvent, () => {
      const wrong = checkConnected();
      if (wrong !== null) this.fail(wrong);
      else this.queue(CLIENT_OPENING);
    });
    socket.on('error', (err) => this.fail(err));
    socket.on('close', () => this.fail(new Error('connection closed')));
  }

  /** True while new calls may be put on this connection. */
  get usable(): boolean {
    return this.error === null && !this.goingAway;
  }

  /** Resolves at the server's first SETTINGS; rejects when the connection fails first. */
  whenReady(): Promise<void> {
    if (this.settled) return Promise.resolve();
    if (this.error !== null) return Promise.reject(this.error);
    return new Promise((ok, fail) => this.waiters.push({ ok, fail }));
  }

  /** Puts `c` on this connection: a stream now, or when the server's limits allow. */
  open(c: FramesCall): void {
    c.conn = this;
    this.waiting.push(c);
    this.pump();
  }

  /** Forgets `c` (ended by the caller): its stream is reset with `code`, or it leaves the queue. */
  drop(c: FramesCall, code: number): void {
    if (c.id === 0 || this.streams.get(c.id) !== c) return;
    this.streams.delete(c.id);
    c.out = null;
    if (this.error === null) this.queue(rstStreamFrame(c.id, code));
    this.pump();
  }

  /** Closes the socket; calls still open end UNAVAILABLE (`connection`). */
  close(): void {
    this.fail(new Error('channel closed by the driver'));
  }

  private pump(): void {
    if (this.error !== null) return;
    if (this.goingAway) {
      this.failWaiting('connection going away (GOAWAY)');
      if (this.streams.size === 0) this.leave();
      return;
    }
    while (this.waiting.length > 0 && this.streams.size < this.maxStreams) {
      const c = this.waiting.shift()!;
      if (!c.ended) this.start(c);
    }
  }

  private start(c: FramesCall): void {
    const id = this.nextId;
    if (id > LAST_STREAM_ID) {
      this.goingAway = true;
      c.failSoon('connection ran out of stream ids');
      return;
    }
    this.nextId += 2;
    c.id = id;
    c.sendWindow = this.streamWindow;
    this.streams.set(id, c);
    const block = c.headerBlock;
    const req = c.out!;
    const n = req.length;
    if (n <= c.sendWindow && n <= this.connWindow && n <= this.maxFrame) {
      // The usual call: HEADERS and the whole request in one buffer.
      this.queue(headersAndData(id, block, req));
      c.sendWindow -= n;
      this.connWindow -= n;
      c.out = null;
      return;
    }
    this.queue(frame(FrameType.HEADERS, Flag.END_HEADERS, id, block));
    this.sendData(c);
  }

  /** Sends what the windows allow of `c`'s request; the rest waits in {@link blocked}. */
  private sendData(c: FramesCall): void {
    const req = c.out;
    if (req === null) return;
    while (c.outAt < req.length) {
      const n = Math.min(req.length - c.outAt, c.sendWindow, this.connWindow, this.maxFrame);
      if (n <= 0) {
        if (!c.blocked) {
          c.blocked = true;
          this.blocked.push(c);
        }
        return;
      }
      const head = Buffer.allocUnsafe(HEADER_BYTES);
      const last = c.outAt + n === req.length;
      writeFrameHeader(head, 0, n, FrameType.DATA, last ? Flag.END_STREAM : 0, c.id);
      this.queue(head);
      this.queue(req.subarray(c.outAt, c.outAt + n));
      c.outAt += n;
      c.sendWindow -= n;
      this.connWindow -= n;
    }
    c.out = null;
  }

  private resumeBlocked(): void {
    const list = this.blocked;
    this.blocked = [];
    for (const c of list) {
      c.blocked = false;
      if (this.streams.get(c.id) === c) this.sendData(c);
    }
  }

  private queue(buf: Buffer): void {
    this.writer.queue(buf);
  }

  /** @internal {@link FrameReader}'s handler: one whole frame from the server. */
  onFrame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.partial !== null && type !== FrameType.CONTINUATION)
      throw new Error('frame inside a header block (expected CONTINUATION)');
    switch (type) {
      case FrameType.DATA:
        this.onData(flags, id, payload);
        break;
      case FrameType.HEADERS: {
        const fragment = headerFragment(type, flags, payload);
        const endStream = (flags & Flag.END_STREAM) !== 0;
        if (flags & Flag.END_HEADERS) this.onHeaderBlock(id, endStream, fragment);
        else this.partial = { id, endStream, parts: [Buffer.from(fragment)] };
        break;
      }
      case FrameType.CONTINUATION: {
        const p = this.partial;
        if (p === null || p.id !== id) throw new Error(`unexpected CONTINUATION on stream ${id}`);
        p.parts.push(Buffer.from(payload));
        if (flags & Flag.END_HEADERS) {
          this.partial = null;
          this.onHeaderBlock(id, p.endStream, Buffer.concat(p.parts));
        }
        break;
      }
      case FrameType.RST_STREAM:
        this.onReset(id, payload.readUInt32BE(0));
        break;
      case FrameType.SETTINGS:
        if (!(flags & Flag.ACK)) this.onSettings(payload);
        break;
      case FrameType.PING:
        if (!(flags & Flag.ACK)) this.queue(frame(FrameType.PING, Flag.ACK, 0, payload));
        break;
      case FrameType.GOAWAY:
        this.onGoaway(payload.readUInt32BE(0) & MAX_WINDOW, payload.readUInt32BE(4));
        break;
      case FrameType.WINDOW_UPDATE: {
        const inc = payload.readUInt32BE(0) & MAX_WINDOW;
        if (id === 0) this.connWindow += inc;
        else {
          const c = this.streams.get(id);
          if (c !== undefined) c.sendWindow += inc;
        }
        this.resumeBlocked();
        break;
      }
      default:
      // PRIORITY, PUSH_PROMISE (push is off) and unknown types carry nothing for us (RFC 9113 §5.5).
    }
  }

  private onData(flags: number, id: number, payload: Buffer): void {
    // Flow control counts whole payloads, padding included, of live and forgotten streams alike.
    this.unacked += payload.length;
    if (this.unacked >= REFILL_AT) {
      this.queue(windowUpdateFrame(0, this.unacked));
      this.unacked = 0;
    }
    const c = this.streams.get(id);
    if (c === undefined) return;
    const data = dataOf(flags, payload);
    c.bytes += data.length;
    if (c.chunks !== null) {
      // A view, not a copy: a body is handed on before the next read, or the read is kept (see below).
      if (c.heldFrom < 0) {
        c.heldFrom = c.chunks.length;
        this.holders.push(c);
      }
      c.chunks.push(data);
    }
    c.received += payload.length;
    if (c.received >= REFILL_AT && !(flags & Flag.END_STREAM)) {
      this.queue(windowUpdateFrame(id, c.received));
      c.received = 0;
    }
    if (flags & Flag.END_STREAM) this.end(c, INTERNAL, 'stream ended without trailers', 'stream');
  }

  private onHeaderBlock(id: number, endStream: boolean, block: Buffer): void {
    // Every block is decoded, a forgotten stream's too: the dynamic table must follow the server's.
    const fields = this.hpack.decode(block);
    const c = this.streams.get(id);
    if (c === undefined) return;
    if (!c.gotHeaders) {
      c.gotHeaders = true;
      c.level = fields.get(LEVEL_HEADER) ?? '';
    }
    // A trailers-only answer (errors) carries the status in its only block.
    const st = fields.get('grpc-status');
    if (st !== undefined) this.end(c, Number(st), grpcMessage(fields.get('grpc-message')), 'server');
    else if (endStream) this.end(c, UNKNOWN, 'no grpc-status in the trailers', 'stream');
  }

  /** The server ended `c`'s stream: frees it (resetting our half when our request is not all sent). */
  private end(c: FramesCall, code: number, details: string, end: CallEnd): void {
    this.streams.delete(c.id);
    if (c.out !== null) {
      c.out = null;
      this.queue(rstStreamFrame(c.id, ErrorCode.CANCEL));
    }
    c.finish(code, details, end);
    this.pump();
  }

  private onReset(id: number, code: number): void {
    const c = this.streams.get(id);
    if (c === undefined) return;
    c.out = null; // nothing more to send, and no reset back
    // As raw-grpc.ts: a refused stream never reached the service; CANCEL is gRPC's CANCELLED.
    if (code === ErrorCode.REFUSED_STREAM)
      this.end(c, UNAVAILABLE, `stream refused (rst ${code})`, 'connection');
    else
      this.end(c, code === ErrorCode.CANCEL ? CANCELLED : INTERNAL, `stream closed (rst ${code})`, 'stream');
  }

  private onSettings(payload: Buffer): void {
    const s = readSettings(payload);
    // Unlimited streams until the server says otherwise (RFC 9113 §6.5.2).
    this.maxStreams = s.maxStreams ?? (this.settled ? this.maxStreams : Number.POSITIVE_INFINITY);
    this.maxFrame = s.maxFrame ?? this.maxFrame;
    if (s.initialWindow !== undefined) {
      // Changes every open stream's window by the difference (RFC 9113 §6.9.2).
      const delta = s.initialWindow - this.streamWindow;
      this.streamWindow = s.initialWindow;
      for (const c of this.streams.values()) c.sendWindow += delta;
    }
    this.queue(SETTINGS_ACK);
    if (!this.settled) {
      this.settled = true;
      for (const w of this.waiters.splice(0)) w.ok();
    }
    this.resumeBlocked();
    this.pump();
  }

  private onGoaway(lastId: number, code: number): void {
    this.goingAway = true;
    const unprocessed = [...this.streams].filter(([id]) => id > lastId);
    for (const [id, c] of unprocessed) {
      this.streams.delete(id);
      c.out = null;
      // Not processed, but the server may still hold them open: closing them lets it finish.
      this.queue(rstStreamFrame(id, ErrorCode.CANCEL));
      c.finish(UNAVAILABLE, `GOAWAY (code ${code}): stream ${id} not processed`, 'connection');
    }
    this.pump();
  }

  private failWaiting(details: string): void {
    const waiting = this.waiting;
    this.waiting = [];
    for (const c of waiting) c.finish(UNAVAILABLE, details, 'connection');
  }

  /** After GOAWAY and the last stream: sends what is queued (resets of streams not taken) and our GOAWAY. */
  private leave(): void {
    this.error = new Error('connection closed after GOAWAY');
    this.reader.stopped = true;
    this.queue(GOAWAY_DONE);
    this.writer.flushNow();
    // Gone once our bytes are out: a server that keeps its half open must not keep the socket.
    this.socket.end(() => this.socket.destroy());
  }

  private fail(err: Error): void {
    if (this.error !== null) return;
    this.error = err;
    this.reader.stopped = true;
    this.socket.destroy();
    for (const w of this.waiters.splice(0)) w.fail(err);
    const open = [...this.streams.values()];
    this.streams.clear();
    for (const c of open) c.finish(UNAVAILABLE, `connection lost: ${err.message}`, 'connection');
    this.failWaiting(`connection lost: ${err.message}`);
  }
}
