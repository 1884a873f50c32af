/**
 * A ~10 MB answer (request history spliced with the formatter's bytes, src/wire/spliced.ts) was framed
 * by grpc-js's `serializeMessage` into a fresh 10 MB buffer on the main thread: ~14 ms of page faults and
 * copying per answer, and 10 MB of external memory that made V8 start a mark-compact about once per such
 * answer. grpc-js writes one Buffer per message and has no option for more; upstream discussed letting a
 * server write the gRPC frame itself in https://github.com/grpc/grpc-node/pull/2652 (closed unmerged: the
 * maintainer preferred optimising the copy first). So `BaseServerInterceptingCall.sendMessage` is wrapped:
 * values the service gathers go out as chunks, every other value through the original method.
 */
import { firstPatchState, type ServerInterceptorsModule, serverCallPrototype } from './grpc-js-private.js';

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

/** grpc-js's server call as the gathered send reads it (private module). */
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

/** Chunks of a response value, or null for grpc-js's own path. */
type Gather = (value: unknown, serialize: (value: unknown) => unknown) => GatheredMessage | null;

interface SendMessagePrototype {
  sendMessage(this: SendingServerCall, message: unknown, callback: () => void): void;
}

const GATHERS = Symbol('ibex gathered send');
let gatheredSent = 0;

/** How many responses this process wrote as gathered chunks (tests: which path an answer took). */
export function gatheredMessagesSent(): number {
  return gatheredSent;
}

/** gRPC status codes this hook answers with (grpc-js `Status`). */
const RESOURCE_EXHAUSTED = 8;
const INTERNAL = 13;

/**
 * Wraps `BaseServerInterceptingCall.sendMessage` once per process: a value for which `gather` returns a
 * {@link GatheredMessage} is written as its 5-byte prefix and chunks, corked into one `writev`; Node's
 * HTTP/2 layer sends them from where they are. Every other value goes through the original method. The
 * checks are grpc-js's own (cancelled call, send size cap, write errors → INTERNAL). Calling it again only
 * swaps `gather`.
 * @param gather the message for `value` in chunks (serializing it with `serialize`), or null.
 * @param mod the module to patch (tests pass one without the method).
 * @throws GrpcJsInternalsChanged when grpc-js no longer has the method.
 */
export function sendGatheredMessages(gather: Gather, mod?: ServerInterceptorsModule): void {
  const proto = serverCallPrototype<SendMessagePrototype & { [GATHERS]?: { gather: Gather } }>(
    ['sendMessage'],
    mod,
  );
  const state = firstPatchState(proto, GATHERS, { gather });
  if (state === null) return;
  const original = proto.sendMessage;
  proto.sendMessage = function sendMessage(this: SendingServerCall, message, callback): void {
    if (this.checkCancelled()) return;
    let gathered: GatheredMessage | null;
    let chunks: Uint8Array[] = [];
    try {
      gathered = state.gather(message, (v) => this.handler.serialize(v));
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
}
