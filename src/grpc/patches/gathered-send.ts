// Large answers go out as the chunks that hold them (grpc-node#2652, unmerged): docs/design/grpc-patches.md.
import { firstPatchState, type ServerInterceptorsModule, serverCallPrototype } from './grpc-js-private.js';

/** A response message sent as several uncopied chunks (see {@link sendGatheredMessages}). */
export interface GatheredMessage {
  /** Bytes of the message (without the 5-byte gRPC prefix). */
  readonly byteLength: number;
  chunks(): Uint8Array[];
  /** Called once the last chunk is written (`ok`) or failed; until then its buffers must not change. */
  written(ok: boolean): void;
}

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

const RESOURCE_EXHAUSTED = 8;
const INTERNAL = 13;

/**
 * Wraps `sendMessage`: a value `gather` returns chunks for is written as prefix + chunks in one corked
 * `writev`, with grpc-js's own checks. @throws GrpcJsInternalsChanged when grpc-js no longer has the method.
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
