/**
 * HTTP/2 framing for the load driver's `frames` transport (issue 10): just what a client of unary gRPC
 * calls needs (RFC 9113 §4, §6), written by hand because it is a few fixed byte layouts, and an HPACK
 * decoder for answers in hpack-reader.ts. Requests need no encoder state: their header blocks are literal
 * fields without indexing (RFC 7541 §6.2.2), built once.
 */
import type { Socket } from 'node:net';

/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/** Frame types (RFC 9113 §6). */
export const FrameType = {
  DATA: 0,
  HEADERS: 1,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

/** Frame flags (RFC 9113 §6). ACK shares END_STREAM's bit on SETTINGS and PING. */
export const Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

/** SETTINGS identifiers (RFC 9113 §6.5.2). */
export const Setting = {
  HEADER_TABLE_SIZE: 1,
  ENABLE_PUSH: 2,
  MAX_CONCURRENT_STREAMS: 3,
  INITIAL_WINDOW_SIZE: 4,
  MAX_FRAME_SIZE: 5,
} as const;

/** Error codes of RST_STREAM and GOAWAY (RFC 9113 §7) that the transport sends or reads. */
export const ErrorCode = { NO_ERROR: 0, PROTOCOL_ERROR: 1, REFUSED_STREAM: 7, CANCEL: 8 } as const;

/** Frame header size, bytes. */
export const HEADER_BYTES = 9;
/** The largest flow-control window (RFC 9113 §6.9.1), bytes. */
export const MAX_WINDOW = 0x7fffffff;
/** SETTINGS_MAX_FRAME_SIZE's default and the largest frame payload we accept (we never raise it), bytes. */
export const DEFAULT_MAX_FRAME = 16_384;
/** Flow-control windows before SETTINGS / WINDOW_UPDATE change them, bytes. */
export const DEFAULT_WINDOW = 65_535;

/** Writes a 9-byte frame header at `at` of `buf`. */
export function writeFrameHeader(
  buf: Buffer,
  at: number,
  length: number,
  type: number,
  flags: number,
  streamId: number,
): void {
  buf[at] = (length >>> 16) & 0xff;
  buf[at + 1] = (length >>> 8) & 0xff;
  buf[at + 2] = length & 0xff;
  buf[at + 3] = type;
  buf[at + 4] = flags;
  buf.writeUInt32BE(streamId & MAX_WINDOW, at + 5);
}

/** Received bytes after which we hand the window back (half of it: the sender never runs dry). */
export const REFILL_AT = Math.floor(MAX_WINDOW / 2);
/** The last client stream id (RFC 9113 §5.1.1); a connection that reaches it goes away. */
export const LAST_STREAM_ID = MAX_WINDOW;

/** HEADERS (END_HEADERS) with `block` and DATA (END_STREAM) with all of `data`, in one buffer. */
export function headersAndData(streamId: number, block: Buffer, data: Buffer): Buffer {
  const buf = Buffer.allocUnsafe(2 * HEADER_BYTES + block.length + data.length);
  writeFrameHeader(buf, 0, block.length, FrameType.HEADERS, Flag.END_HEADERS, streamId);
  block.copy(buf, HEADER_BYTES);
  const at = HEADER_BYTES + block.length;
  writeFrameHeader(buf, at, data.length, FrameType.DATA, Flag.END_STREAM, streamId);
  data.copy(buf, at + HEADER_BYTES);
  return buf;
}

/** A frame with `payload`. */
export function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  writeFrameHeader(out, 0, payload.length, type, flags, streamId);
  payload.copy(out, HEADER_BYTES);
  return out;
}

/** A SETTINGS frame with `[id, value]` pairs. */
export function settingsFrame(pairs: readonly (readonly [number, number])[]): Buffer {
  const payload = Buffer.allocUnsafe(6 * pairs.length);
  pairs.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, 6 * i);
    payload.writeUInt32BE(value, 6 * i + 2);
  });
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

/** The SETTINGS a client acts on; absent when the frame does not set them. */
export interface PeerSettings {
  maxStreams?: number;
  maxFrame?: number;
  initialWindow?: number;
}

/**
 * Reads a SETTINGS payload (RFC 9113 §6.5); the last value of a repeated setting wins.
 * @throws Error when the payload is not a multiple of 6 bytes (FRAME_SIZE_ERROR).
 */
export function readSettings(payload: Buffer): PeerSettings {
  if (payload.length % 6 !== 0) throw new Error('SETTINGS payload is not a multiple of 6 bytes');
  const out: PeerSettings = {};
  for (let at = 0; at < payload.length; at += 6) {
    const key = payload.readUInt16BE(at);
    const value = payload.readUInt32BE(at + 2);
    if (key === Setting.MAX_CONCURRENT_STREAMS) out.maxStreams = value;
    else if (key === Setting.MAX_FRAME_SIZE) out.maxFrame = value;
    else if (key === Setting.INITIAL_WINDOW_SIZE) out.initialWindow = value;
  }
  return out;
}

/** SETTINGS with ACK. */
export const SETTINGS_ACK = frame(FrameType.SETTINGS, Flag.ACK, 0, Buffer.alloc(0));

/** A WINDOW_UPDATE of `increment` bytes (1 … 2^31-1) for `streamId` (0: the connection). */
export function windowUpdateFrame(streamId: number, increment: number): Buffer {
  const payload = Buffer.allocUnsafe(4);
  payload.writeUInt32BE(increment, 0);
  return frame(FrameType.WINDOW_UPDATE, 0, streamId, payload);
}

/** RST_STREAM of `streamId` with `code`. */
export function rstStreamFrame(streamId: number, code: number): Buffer {
  const payload = Buffer.allocUnsafe(4);
  payload.writeUInt32BE(code, 0);
  return frame(FrameType.RST_STREAM, 0, streamId, payload);
}

/** Our first bytes: preface, SETTINGS (no push, largest stream window), connection window to the max. */
export const CLIENT_OPENING = Buffer.concat([
  PREFACE,
  settingsFrame([
    [Setting.ENABLE_PUSH, 0],
    [Setting.INITIAL_WINDOW_SIZE, MAX_WINDOW],
  ]),
  windowUpdateFrame(0, MAX_WINDOW - DEFAULT_WINDOW),
]);
/** GOAWAY: no server streams taken (we allow none), no error. */
export const GOAWAY_DONE = frame(FrameType.GOAWAY, 0, 0, Buffer.alloc(8));
/** HPACK integer with an `prefixBits`-bit prefix whose high bits are `first` (RFC 7541 §5.1). */
function hpackInt(out: number[], first: number, prefixBits: number, value: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(first | value);
    return;
  }
  out.push(first | max);
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
}

/** A raw (not Huffman-coded) HPACK string literal (RFC 7541 §5.2). */
function hpackString(out: number[], s: string): void {
  const bytes = Buffer.from(s, 'latin1');
  hpackInt(out, 0, 7, bytes.length);
  for (const b of bytes) out.push(b);
}

/**
 * A header block of literal fields with new names (RFC 7541 §6.2.2 "without indexing", §6.2.3 "never
 * indexed" for the names in `secret`), so it needs no encoder state and can be cached and sent any
 * number of times. Names must be lowercase; values ASCII.
 */
export function literalHeaderBlock(
  fields: readonly (readonly [string, string])[],
  secret: ReadonlySet<string> = new Set(),
): Buffer {
  const out: number[] = [];
  for (const [name, value] of fields) {
    out.push(secret.has(name) ? 0x10 : 0x00);
    hpackString(out, name);
    hpackString(out, value);
  }
  return Buffer.from(out);
}

/** What {@link FrameReader} hands on: one whole frame. `payload` is a view valid until the handler returns. */
export interface FrameHandler {
  onFrame(type: number, flags: number, streamId: number, payload: Buffer): void;
}

/**
 * Splits a byte stream into frames, however reads cut it. Only frames up to {@link DEFAULT_MAX_FRAME}
 * bytes are accepted (we never advertise more).
 */
export class FrameReader {
  private rest: Buffer | null = null;
  /** Set by the owner to stop a feed mid-chunk (the connection was closed from a handler). */
  stopped = false;

  constructor(private readonly handler: FrameHandler) {}

  /**
   * Feeds one read. Frames are handed on in order; an incomplete tail waits for the next read.
   * @throws Error `frame of N bytes exceeds …` (a connection error: FRAME_SIZE_ERROR).
   */
  feed(chunk: Buffer): void {
    let buf = chunk;
    if (this.rest !== null) {
      buf = Buffer.concat([this.rest, chunk]);
      this.rest = null;
    }
    let at = 0;
    const end = buf.length;
    while (end - at >= HEADER_BYTES && !this.stopped) {
      const length = (buf[at]! << 16) | (buf[at + 1]! << 8) | buf[at + 2]!;
      if (length > DEFAULT_MAX_FRAME)
        throw new Error(`frame of ${length} bytes exceeds SETTINGS_MAX_FRAME_SIZE ${DEFAULT_MAX_FRAME}`);
      const next = at + HEADER_BYTES + length;
      if (next > end) break;
      const type = buf[at + 3]!;
      const flags = buf[at + 4]!;
      const streamId = buf.readUInt32BE(at + 5) & MAX_WINDOW;
      this.handler.onFrame(type, flags, streamId, buf.subarray(at + HEADER_BYTES, next));
      at = next;
    }
    // A copy, so a kept tail does not pin the whole read.
    if (at < end && !this.stopped) this.rest = Buffer.from(buf.subarray(at));
  }
}

/**
 * The field fragment of a HEADERS or CONTINUATION payload: padding and the priority block removed
 * (RFC 9113 §6.2). @throws Error when the padding is longer than the payload (PROTOCOL_ERROR).
 */
export function headerFragment(type: number, flags: number, payload: Buffer): Buffer {
  if (type !== FrameType.HEADERS) return payload;
  let start = 0;
  let end = payload.length;
  if (flags & Flag.PADDED) {
    start = 1;
    end -= payload[0] ?? 0;
  }
  if (flags & Flag.PRIORITY) start += 5;
  if (end < start) throw new Error('HEADERS padding exceeds the payload');
  return payload.subarray(start, end);
}

/**
 * The data of a DATA payload without its padding (RFC 9113 §6.1).
 * @throws Error when the padding is longer than the payload (PROTOCOL_ERROR).
 */
export function dataOf(flags: number, payload: Buffer): Buffer {
  if (!(flags & Flag.PADDED)) return payload;
  const end = payload.length - (payload[0] ?? 0);
  if (end < 1) throw new Error('DATA padding exceeds the payload');
  return payload.subarray(1, end);
}

/** Above this many queued bytes a turn's writes go out as one writev, not copied into one buffer. */
const CONCAT_LIMIT = 256 * 1024;

/** Collects a turn of the loop's frames and writes them to the socket in one write. */
export class CoalescingWriter {
  private out: Buffer[] = [];
  private bytes = 0;
  private queued = false;

  /** One function for every turn's flush, not a closure per turn. */
  private readonly flushLater = () => this.flush();

  constructor(private readonly socket: Socket) {}

  /** Queues `buf` (not copied: it must not change until the turn ends). */
  queue(buf: Buffer): void {
    this.out.push(buf);
    this.bytes += buf.length;
    if (!this.queued) {
      this.queued = true;
      process.nextTick(this.flushLater);
    }
  }

  /** Writes what is queued now, not at the end of the turn. */
  flushNow(): void {
    this.flush();
  }

  private flush(): void {
    this.queued = false;
    const out = this.out;
    const bytes = this.bytes;
    this.out = [];
    this.bytes = 0;
    if (this.socket.destroyed || out.length === 0) return;
    if (out.length === 1) this.socket.write(out[0]!);
    else if (bytes <= CONCAT_LIMIT) this.socket.write(Buffer.concat(out, bytes));
    else {
      this.socket.cork();
      for (const b of out) this.socket.write(b);
      this.socket.uncork();
    }
  }
}
