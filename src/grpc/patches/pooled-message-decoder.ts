// Large messages are assembled in pooled buffers, not a fresh `Buffer.concat`. `StreamDecoder.write` is
// replaced: grpc-js 1.14.7's state machine (Apache-2.0) plus that branch. Why: docs/design/grpc-patches.md.
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

interface PooledDecoder extends StreamDecoderFields {
  [FILLING]?: { buf: Buffer; at: number } | null;
  [SCANNER]?: PrefixScanner | null;
}

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
 * Makes grpc-js's decoder (clients in this process too) assemble large messages in `pool`'s buffers.
 * Calling again only swaps the pool. @throws GrpcJsInternalsChanged when `write` or a field is gone.
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
