/**
 * What the gRPC server sets on grpc-js 1.14's private fields, because grpc-js exposes no option for it:
 * the HTTP/2 header-pair limit (issue 11), session teardown on a forced drain (issue 10), large messages
 * assembled in recycled buffers, a response frame the CPU stage built sent as it is, large requests decided
 * from their first bytes and large uploads paced in turns (issue 9). Each
 * hook throws when the field it needs is gone, so a grpc-js upgrade that moves them fails at start-up, not
 * silently.
 */
import http2 from 'node:http2';
import { createRequire } from 'node:module';
import type { Server } from '@grpc/grpc-js';
import { type MessageBufferPool, POOLED_MESSAGE_FROM_BYTES } from '../util/message-buffers.js';
import type { UploadCall, UploadTurns } from './receive-governor.js';

const requireCjs = createRequire(import.meta.url);

/**
 * Issue 11 item 5: Node's HTTP/2 layer refuses a header list of more than `maxHeaderListPairs` (default
 * 128) fields with ENHANCE_YOUR_CALM ("Bandwidth exhausted or memory limit exceeded", ~118 entries or
 * ~4.6 KB) long before the byte limit. Every field costs at least 33 bytes (RFC 9113 §6.5.2: 32 + a name),
 * so `maxBytes / 32` pairs plus the pseudo-headers can never cut a request the byte limit allows; twice
 * that lets a request moderately over it reach {@link metadataLimitInterceptor} and its own message.
 * grpc-js exposes no channel option for this, so it is set on the options grpc-js passes to
 * `http2.createServer` at bind time (private field `commonServerOptions`, grpc-js 1.14).
 */
export function alignHeaderPairLimit(server: Server, maxBytes: number): void {
  const internal = server as unknown as { commonServerOptions?: { maxHeaderListPairs?: number } };
  if (internal.commonServerOptions === undefined)
    throw new Error('grpc-js internals changed: no commonServerOptions');
  internal.commonServerOptions.maxHeaderListPairs = 2 * Math.ceil(maxBytes / 32) + 16;
}

/**
 * grpc-js 1.14 `forceShutdown` destroys only the sessions channelz tracked: with `grpc.enable_channelz: 0`
 * (issue 10) in-flight calls would stay open past the drain grace. So the drain destroys every session
 * grpc-js keeps per HTTP/2 server (private field `http2Servers`) itself, with CANCEL as grpc-js does.
 */
export function destroySessions(server: Server): void {
  const internal = server as unknown as {
    http2Servers?: Map<unknown, { sessions?: Set<http2.ServerHttp2Session> }>;
  };
  for (const info of internal.http2Servers?.values() ?? []) {
    for (const session of info.sessions ?? []) session.destroy(undefined, http2.constants.NGHTTP2_CANCEL);
  }
}

/** grpc-js 1.14 `StreamDecoder` fields (build/src/stream-decoder.js), read and written by the patch. */
interface StreamDecoderFields {
  maxReadMessageLength: number;
  readState: number;
  readCompressFlag: Buffer;
  readPartialSize: Buffer;
  readSizeRemaining: number;
  readMessageSize: number;
  readPartialMessage: Buffer[];
  readMessageRemaining: number;
  /** Ours: the pooled buffer a large message is being copied into, and how far it is filled. */
  [FILLING]?: { buf: Buffer; at: number } | null;
  /** Ours: makes the prefix scanner of the call's method (null: the method has none; unset: not asked yet). */
  [SCAN_FOR]?: (() => PrefixScanner) | null;
  /** Ours: the scanner following the large message being read, if any. */
  [SCANNER]?: PrefixScanner | null;
}

/**
 * Follows a request message's bytes as they arrive; {@link decideRequestsOnTheWire}. `feed` gets the
 * message's next bytes and returns the length of the prefix that decides the request's outcome, or -1.
 */
export interface PrefixScanner {
  feed(data: Uint8Array, start: number, end: number): number;
}
type StreamDecoderClass = (new (
  maxReadMessageLength: number,
) => StreamDecoderFields) & {
  prototype: { write?: unknown; [PATCHED]?: { pool: MessageBufferPool } };
};

const FILLING = Symbol('ibex pooled message');
const SCAN_FOR = Symbol('ibex prefix scanner factory');
const SCANNER = Symbol('ibex prefix scanner');
const PATCHED = Symbol('ibex message pool');
const NO_DATA = 0;
const READING_SIZE = 1;
const READING_MESSAGE = 2;
/** Ours: the message was decided by its prefix; the call's further bytes are dropped unread. */
const DECIDED_EARLY = 3;

/**
 * Issue 9: grpc-js keeps every DATA chunk of a message and then `Buffer.concat`s them into a fresh buffer
 * — for a 10 MB request, 10 MB of new external memory, which V8 repays with mark-compacts on the event
 * loop. A message of {@link POOLED_MESSAGE_FROM_BYTES} or more is instead copied chunk by chunk into a free
 * buffer of `pool` when one fits (src/util/message-buffers.ts); smaller ones, and large ones that find
 * none, take grpc-js's own path unchanged. The
 * decoder's state machine is grpc-js 1.14's (Apache-2.0), with that one branch added; it is the
 * prototype's, so it also serves grpc-js clients in this process (their buffers are simply never
 * released). Calling it again only swaps the pool.
 * @throws Error when grpc-js's StreamDecoder is gone or its fields were renamed (a grpc-js upgrade).
 */
export function assembleLargeMessagesIn(pool: MessageBufferPool): void {
  const mod = requireCjs('@grpc/grpc-js/build/src/stream-decoder.js') as {
    StreamDecoder?: StreamDecoderClass;
  };
  const Decoder = mod.StreamDecoder;
  if (typeof Decoder?.prototype?.write !== 'function')
    throw new Error('grpc-js internals changed: no StreamDecoder.write');
  const probe = new Decoder(-1);
  for (const field of [
    'maxReadMessageLength',
    'readState',
    'readCompressFlag',
    'readPartialSize',
    'readSizeRemaining',
    'readMessageSize',
    'readPartialMessage',
    'readMessageRemaining',
  ])
    if (!(field in probe)) throw new Error(`grpc-js internals changed: StreamDecoder has no ${field}`);
  const proto = Decoder.prototype;
  if (proto[PATCHED]) {
    proto[PATCHED].pool = pool;
    return;
  }
  const state = { pool };
  proto[PATCHED] = state;
  proto.write = function write(this: StreamDecoderFields, data: Buffer): Buffer[] {
    let readHead = 0;
    const result: Buffer[] = [];
    if (this.readState === DECIDED_EARLY) return result;
    while (readHead < data.length) {
      switch (this.readState) {
        case NO_DATA:
          this.readCompressFlag = data.subarray(readHead, readHead + 1);
          readHead += 1;
          this.readState = READING_SIZE;
          this.readPartialSize.fill(0);
          this.readSizeRemaining = 4;
          this.readMessageSize = 0;
          this.readMessageRemaining = 0;
          this.readPartialMessage = [];
          this[FILLING] = null;
          break;
        case READING_SIZE: {
          const toRead = Math.min(data.length - readHead, this.readSizeRemaining);
          data.copy(this.readPartialSize, 4 - this.readSizeRemaining, readHead, readHead + toRead);
          this.readSizeRemaining -= toRead;
          readHead += toRead;
          if (this.readSizeRemaining > 0) break;
          this.readMessageSize = this.readPartialSize.readUInt32BE(0);
          if (this.maxReadMessageLength !== -1 && this.readMessageSize > this.maxReadMessageLength) {
            throw new Error(
              `Received message larger than max (${this.readMessageSize} vs ${this.maxReadMessageLength})`,
            );
          }
          this.readMessageRemaining = this.readMessageSize;
          const scanFor = this[SCAN_FOR];
          this[SCANNER] =
            scanFor && this.readCompressFlag[0] === 0 && this.readMessageSize >= POOLED_MESSAGE_FROM_BYTES
              ? scanFor()
              : null;
          if (this.readMessageRemaining > 0) {
            this.readState = READING_MESSAGE;
            const buf = state.pool.acquire(this.readMessageSize + 5);
            if (buf) {
              buf[0] = this.readCompressFlag[0]!;
              this.readPartialSize.copy(buf, 1);
              this[FILLING] = { buf, at: 5 };
            }
          } else {
            result.push(Buffer.concat([this.readCompressFlag, this.readPartialSize], 5));
            this.readState = NO_DATA;
          }
          break;
        }
        case READING_MESSAGE: {
          const toRead = Math.min(data.length - readHead, this.readMessageRemaining);
          const filling = this[FILLING];
          if (filling) {
            data.copy(filling.buf, filling.at, readHead, readHead + toRead);
            filling.at += toRead;
          } else {
            this.readPartialMessage.push(data.subarray(readHead, readHead + toRead));
          }
          const decided = this[SCANNER]?.feed(data, readHead, readHead + toRead) ?? -1;
          if (decided >= 0) {
            // The prefix is the whole message as far as the deserializer goes: it stops where the scanner did.
            result.push(
              filling
                ? filling.buf.subarray(0, 5 + decided)
                : Buffer.concat(
                    [this.readCompressFlag, this.readPartialSize, ...this.readPartialMessage],
                    5 + decided,
                  ),
            );
            this[FILLING] = null;
            this[SCANNER] = null;
            this.readPartialMessage = [];
            this.readMessageSize = 0;
            this.readMessageRemaining = 0;
            this.readState = DECIDED_EARLY;
            return result;
          }
          this.readMessageRemaining -= toRead;
          readHead += toRead;
          if (this.readMessageRemaining > 0) break;
          if (filling) {
            result.push(filling.buf);
            this[FILLING] = null;
          } else {
            const parts = [this.readCompressFlag, this.readPartialSize, ...this.readPartialMessage];
            result.push(Buffer.concat(parts, this.readMessageSize + 5));
          }
          this.readState = NO_DATA;
          break;
        }
        default:
          throw new Error('Unexpected read state');
      }
    }
    return result;
  };
}

/**
 * The prototype of grpc-js 1.14's `BaseServerInterceptingCall` (private module), which the hooks below wrap.
 * @throws Error when it no longer has `method` (a grpc-js upgrade).
 */
function serverCallPrototype<P>(method: string): P {
  const mod = requireCjs('@grpc/grpc-js/build/src/server-interceptors.js') as {
    BaseServerInterceptingCall?: { prototype: Record<string, unknown> };
  };
  const proto = mod.BaseServerInterceptingCall?.prototype;
  if (typeof proto?.[method] !== 'function')
    throw new Error(`grpc-js internals changed: no BaseServerInterceptingCall.${method}`);
  return proto as P;
}

/**
 * A response message that goes out as several chunks, none of them copied (see
 * {@link sendGatheredMessages}).
 */
export interface GatheredMessage {
  /** Bytes of the message (without the 5-byte gRPC prefix). */
  readonly byteLength: number;
  /** The message's bytes in order: views on the buffers that already hold them. */
  chunks(): Uint8Array[];
  /**
   * Called once, when the last chunk has been written (`ok`), or could not be (the stream failed or
   * was reset). Until then every chunk's buffer must stay as it is: the stream holds them, not copies.
   */
  written(ok: boolean): void;
}

/** grpc-js 1.14's server call as the gathered send reads it (private module). */
interface SendingServerCall {
  checkCancelled(): boolean;
  handler: { serialize(value: unknown): unknown };
  maxSendMessageSize: number;
  maybeSendMetadata(): void;
  sendStatus(status: { code: number; details: string; metadata: null }): void;
  stream: {
    cork(): void;
    uncork(): void;
    write(chunk: Uint8Array, cb?: (err?: Error | null) => void): boolean;
  };
  callEventTracker?: { addMessageSent(): void };
}

interface SendMessagePrototype {
  sendMessage(this: SendingServerCall, message: unknown, callback: () => void): void;
}

let gatherInstalled = false;
let gatheredSent = 0;

/** How many responses this process wrote as gathered chunks (tests: which path an answer took). */
export function gatheredMessagesSent(): number {
  return gatheredSent;
}

/** gRPC status codes this hook answers with (grpc-js `Status`). */
const RESOURCE_EXHAUSTED = 8;
const INTERNAL = 13;

/**
 * Issue 9 (isolation): a ~10 MB context — request history spliced with the formatter's bytes (SPEC §9,
 * src/format/spliced.ts) — was framed by grpc-js's `serializeMessage` into a fresh 10 MB buffer on the
 * main thread: ~14 ms of page faults and copying per answer, and 10 MB of external memory that made V8
 * start a mark-compact about once per such answer. grpc-js writes one Buffer per message and has no
 * option for more, so `BaseServerInterceptingCall.sendMessage` is wrapped once per process: a value for
 * which `gather` returns a {@link GatheredMessage} is written as its 5-byte prefix and chunks, corked
 * into one `writev`; Node's HTTP/2 layer sends them from where they are. Every other value goes through
 * the original method. The checks are grpc-js's own (cancelled call, send size cap, write errors →
 * INTERNAL). Idempotent.
 * @param gather the message for `value` in chunks (serializing it with `serialize`), or null.
 * @throws Error when grpc-js no longer has the method.
 */
export function sendGatheredMessages(
  gather: (value: unknown, serialize: (value: unknown) => unknown) => GatheredMessage | null,
): void {
  if (gatherInstalled) return;
  const proto = serverCallPrototype<SendMessagePrototype>('sendMessage');
  const original = proto.sendMessage;
  proto.sendMessage = function sendMessage(this: SendingServerCall, message, callback): void {
    if (this.checkCancelled()) return;
    let gathered: GatheredMessage | null;
    let chunks: Uint8Array[] = [];
    try {
      gathered = gather(message, (v) => this.handler.serialize(v));
      // Views are taken here, where a span past its bytes (a released buffer) can still fail the call.
      if (gathered !== null) chunks = gathered.chunks();
    } catch {
      this.sendStatus({ code: INTERNAL, details: 'Error serializing response', metadata: null });
      return;
    }
    if (gathered === null) {
      original.call(this, message, callback);
      return;
    }
    const g = gathered;
    if (this.maxSendMessageSize !== -1 && g.byteLength > this.maxSendMessageSize) {
      g.written(false);
      this.sendStatus({
        code: RESOURCE_EXHAUSTED,
        details: `Sent message larger than max (${g.byteLength + 5} vs. ${this.maxSendMessageSize})`,
        metadata: null,
      });
      return;
    }
    const prefix = Buffer.allocUnsafe(5);
    prefix.writeUInt8(0, 0);
    prefix.writeUInt32BE(g.byteLength, 1);
    this.maybeSendMetadata();
    gatheredSent++;
    const stream = this.stream;
    stream.cork();
    stream.write(prefix);
    for (let i = 0; i < chunks.length - 1; i++) stream.write(chunks[i]!);
    stream.write(chunks[chunks.length - 1] ?? Buffer.alloc(0), (error) => {
      g.written(!error);
      if (error) {
        this.sendStatus({ code: INTERNAL, details: 'Internal server error', metadata: null });
        return;
      }
      this.callEventTracker?.addMessageSent();
      callback();
    });
    stream.uncork();
  };
  gatherInstalled = true;
}

/** grpc-js 1.14's server call as the governor hook reads it (private module). */
interface GovernedCall {
  handleDataFrame(this: GovernedCall, data: Buffer): void;
  stream: http2.ServerHttp2Stream;
  decoder: StreamDecoderFields;
  [RESUME_TIMER]?: NodeJS.Timeout;
  [UPLOAD]?: StreamUpload;
}

/** A call's large upload as {@link UploadTurns} sees it. */
class StreamUpload implements UploadCall {
  constructor(
    readonly stream: http2.ServerHttp2Stream,
    readonly decoder: StreamDecoderFields,
  ) {}
  get remaining(): number {
    return this.decoder.readMessageRemaining;
  }
  get gone(): boolean {
    return this.stream.destroyed || this.stream.closed;
  }
  pause(): void {
    this.stream.pause();
  }
  resume(): void {
    if (!this.gone) this.stream.resume();
  }
}

const GOVERNED = Symbol('ibex receive governor');
const RESUME_TIMER = Symbol('ibex governor resume');
const UPLOAD = Symbol('ibex upload turn');
let pausesApplied = 0;
let turnWaits = 0;

/** How many times this process paused a stream for its connection's large-message budget (metrics). */
export function receivePauses(): number {
  return pausesApplied;
}

/** How many times a large upload was paused to wait for its connection's turn (metrics). */
export function uploadTurnWaits(): number {
  return turnWaits;
}

/** What {@link governLargeMessages} applies to each connection's large messages. */
export interface LargeMessagePolicy {
  /** The connection's receive rate (src/server/receive-governor.ts). */
  governor: { take(connection: object, bytes: number): number };
  /** Turns between a connection's large uploads; absent: they share its rate as HTTP/2 shares it. */
  turns?: UploadTurns<UploadCall>;
}

/**
 * Issue 9: paces the large request messages of each connection with `policy.governor`, in turns
 * (`policy.turns`; src/server/receive-governor.ts). grpc-js 1.14 hands every DATA chunk of a call to
 * `BaseServerInterceptingCall.handleDataFrame`; the wrapper lets it decode the chunk, then, when the chunk
 * belongs to a message of {@link POOLED_MESSAGE_FROM_BYTES} or more: a call whose turn it is not is paused
 * until its turn; the active call's chunk is charged to the connection, and past the budget its HTTP/2
 * stream is paused until the bucket refills. A paused stream stops consuming its flow-control window, so
 * the sender's further bytes wait on its side. A complete message or a closed stream passes the turn on.
 * grpc-js pauses and resumes the stream itself only between messages, so the resumes here cannot undo one
 * of its own pauses mid-message; a call cancelled or past its deadline meanwhile is simply not resumed.
 * Calling it again only swaps the policy.
 * @throws Error when grpc-js no longer has the method.
 */
export function governLargeMessages(policy: LargeMessagePolicy): void {
  const proto = serverCallPrototype<GovernedCall & { [GOVERNED]?: { policy: LargeMessagePolicy } }>(
    'handleDataFrame',
  );
  if (proto[GOVERNED]) {
    proto[GOVERNED].policy = policy;
    return;
  }
  const state = { policy };
  proto[GOVERNED] = state;
  const original = proto.handleDataFrame;
  proto.handleDataFrame = function handleDataFrame(this: GovernedCall, data: Buffer): void {
    original.call(this, data);
    const decoder = this.decoder;
    const { governor, turns } = state.policy;
    const stream = this.stream;
    const connection = stream.session ?? stream;
    let upload = this[UPLOAD];
    // A message decided early (decideRequestsOnTheWire) reads nothing more: its turn passes on now.
    if (turns && upload && decoder?.readState === DECIDED_EARLY) turns.done(connection, upload);
    // Set by the decoder from the message's prefix; it stays until the next message starts.
    if (!(decoder?.readMessageSize >= POOLED_MESSAGE_FROM_BYTES)) return;
    if (turns) {
      if (upload === undefined) {
        const created = new StreamUpload(stream, decoder);
        upload = created;
        this[UPLOAD] = created;
        stream.once('close', () => turns.done(connection, created));
      }
      if (decoder.readState !== READING_MESSAGE) turns.done(connection, upload);
      else if (!turns.arrived(connection, upload)) {
        turnWaits++;
        return;
      }
    }
    const pauseMs = governor.take(connection, data.length);
    if (pauseMs <= 0 || this[RESUME_TIMER] !== undefined || stream.destroyed) return;
    stream.pause();
    pausesApplied++;
    if (turns && upload) turns.held(connection, upload, pauseMs);
    this[RESUME_TIMER] = setTimeout(() => {
      this[RESUME_TIMER] = undefined;
      if (!stream.destroyed) stream.resume();
    }, Math.ceil(pauseMs));
    this[RESUME_TIMER].unref();
  };
}

/** What grpc-js 1.14 keeps of a registered method (`handler` of a server call). */
export interface MethodHandler {
  path?: string;
  deserialize?: (bytes: Buffer) => unknown;
}

/** grpc-js 1.14's server call as the early-decision hook reads it (private module). */
interface EarlyDecidedCall {
  handleDataFrame(this: EarlyDecidedCall, data: Buffer): void;
  handleEndEvent(this: EarlyDecidedCall): void;
  stream: http2.ServerHttp2Stream;
  decoder: StreamDecoderFields;
  handler?: MethodHandler;
  [ENDED_EARLY]?: boolean;
}

const DECIDES = Symbol('ibex early decisions');
const ENDED_EARLY = Symbol('ibex request ended early');
let decidedEarly = 0;

/** How many requests this process decided from a prefix of their bytes (tests, metrics). */
export function requestsDecidedEarly(): number {
  return decidedEarly;
}

/**
 * Issue 9, SPEC §11 ("counts are checked on the wire … at a cost independent of that count"): a large
 * request message (≥ {@link POOLED_MESSAGE_FROM_BYTES}, uncompressed) of a method for which `scannerFor`
 * returns a scanner (it is asked with the method's handler, whose deserializer the scanner must match) is
 * followed as its DATA frames arrive. Once the scanner says the bytes so far decide the outcome, grpc-js
 * is handed that prefix as the whole message and the request as ended: the handler runs on it and
 * answers through the interceptors as for any other call (metrics, logs), the rest of the upload is
 * dropped unread, and once the answer is sent the stream is reset with NO_ERROR, which RFC 9113
 * §8.1 provides for a server that answered before the request ended, so the client stops sending. Without
 * it a two-million-message request (4 MB) had to arrive in full, behind every other upload on its
 * connection and through its receive governor, before its refusal. Calling it again only swaps the choice
 * of scanner.
 * @param scannerFor the scanner factory for a registered method, or null for methods that have none.
 * @throws Error when grpc-js no longer has the methods it wraps.
 */
export function decideRequestsOnTheWire(
  scannerFor: (handler: MethodHandler) => (() => PrefixScanner) | null,
): void {
  const proto = serverCallPrototype<EarlyDecidedCall & { [DECIDES]?: { scannerFor: typeof scannerFor } }>(
    'handleDataFrame',
  );
  if (typeof proto.handleEndEvent !== 'function')
    throw new Error('grpc-js internals changed: no BaseServerInterceptingCall.handleEndEvent');
  if (proto[DECIDES]) {
    proto[DECIDES].scannerFor = scannerFor;
    return;
  }
  const state = { scannerFor };
  proto[DECIDES] = state;
  const originalData = proto.handleDataFrame;
  const originalEnd = proto.handleEndEvent;
  proto.handleDataFrame = function handleDataFrame(this: EarlyDecidedCall, data: Buffer): void {
    const decoder = this.decoder;
    if (decoder && decoder[SCAN_FOR] === undefined)
      decoder[SCAN_FOR] = this.handler ? state.scannerFor(this.handler) : null;
    originalData.call(this, data);
    if (decoder?.readState !== DECIDED_EARLY || this[ENDED_EARLY]) return;
    this[ENDED_EARLY] = true;
    decidedEarly++;
    const stream = this.stream;
    // 'finish': the answer (trailers included) is written; the client's further bytes are not wanted.
    stream.once('finish', () => {
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    });
    originalEnd.call(this);
  };
  proto.handleEndEvent = function handleEndEvent(this: EarlyDecidedCall): void {
    if (this[ENDED_EARLY]) return;
    originalEnd.call(this);
  };
}
