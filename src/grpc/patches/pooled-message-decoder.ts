/**
 * grpc-js keeps every DATA chunk of a message and then `Buffer.concat`s them into a fresh buffer: for a
 * 10 MB request, 10 MB of new external memory, which V8 repays with mark-compacts on the event loop. A
 * message of `POOLED_MESSAGE_FROM_BYTES` or more is instead copied chunk by chunk into a free buffer of a
 * pool when one fits (src/util/message-buffers.ts); smaller ones, and large ones that find none, take
 * grpc-js's own path unchanged. The branch sits inside `StreamDecoder.prototype.write`'s state machine, so
 * the method is replaced, not wrapped: the state machine below is grpc-js 1.14.7's (Apache-2.0) with that
 * branch and the early decision's prefix scanner (src/grpc/patches/early-decision.ts) added. No upstream issue
 * or PR asks grpc-js to assemble messages in caller-provided buffers (searched grpc/grpc-node; the closest,
 * https://github.com/grpc/grpc-node/pull/2652, is about the send side).
 */
import { type MessageBufferPool, POOLED_MESSAGE_FROM_BYTES } from '../../util/message-buffers.js';
import {
  firstPatchState,
  GrpcJsInternalsChanged,
  grpcJsModule,
  type PrefixScanner,
  READ_STATE,
  SCAN_FOR,
  STREAM_DECODER_FIELDS,
  type StreamDecoderFields,
} from './grpc-js-private.js';

/** The decoder as this patch sees it: grpc-js's fields plus the buffer being filled and the live scanner. */
interface PooledDecoder extends StreamDecoderFields {
  [FILLING]?: { buf: Buffer; at: number } | null;
  [SCANNER]?: PrefixScanner | null;
}

/** The private module holding `StreamDecoder`. */
export interface StreamDecoderModule {
  StreamDecoder?: StreamDecoderClass;
}

type StreamDecoderClass = (new (
  maxReadMessageLength: number,
) => StreamDecoderFields) & {
  prototype: { write?: unknown; [PATCHED]?: { pool: MessageBufferPool } };
};

const FILLING = Symbol('ibex pooled message');
const SCANNER = Symbol('ibex prefix scanner');
const PATCHED = Symbol('ibex message pool');
const { NO_DATA, READING_SIZE, READING_MESSAGE, DECIDED_EARLY } = READ_STATE;

/**
 * Makes grpc-js's decoder assemble large messages in `pool`'s buffers. It is the prototype's, so it also
 * serves grpc-js clients in this process (their buffers are simply never released). Calling it again only
 * swaps the pool.
 * @param mod the module to patch (tests pass one without the class or a field).
 * @throws GrpcJsInternalsChanged when `StreamDecoder.write` or one of its fields is gone.
 */
export function assembleLargeMessagesIn(
  pool: MessageBufferPool,
  mod: StreamDecoderModule = grpcJsModule('stream-decoder.js'),
): void {
  const Decoder = mod.StreamDecoder;
  if (typeof Decoder?.prototype?.write !== 'function')
    throw new GrpcJsInternalsChanged('no StreamDecoder.write');
  const probe = new Decoder(-1);
  for (const field of STREAM_DECODER_FIELDS)
    if (!(field in probe)) throw new GrpcJsInternalsChanged(`StreamDecoder has no ${field}`);
  const proto = Decoder.prototype;
  const state = firstPatchState(proto, PATCHED, { pool });
  if (state === null) return;
  proto.write = function write(this: PooledDecoder, data: Buffer): Buffer[] {
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
