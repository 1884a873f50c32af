/**
 * Large uploads of one connection take turns (src/grpc/upload-turns.ts): grpc-js hands every DATA chunk of
 * a call to the private `BaseServerInterceptingCall.handleDataFrame` and offers no hook between the
 * HTTP/2 stream and its decoder, so the method is wrapped. The original decodes the chunk first; the
 * wrapper then pauses the HTTP/2 stream of a call whose turn it is not. A paused stream stops consuming
 * its flow-control window, so the sender's further bytes wait on its side. No upstream issue or PR asks
 * grpc-js for per-call read scheduling (searched grpc/grpc-node); it is this service's isolation policy.
 */

import type http2 from 'node:http2';
import { transportCount } from '../../telemetry/transport-counters.js';
import { POOLED_MESSAGE_FROM_BYTES } from '../../util/message-buffers.js';
import type { UploadCall, UploadTurns } from '../upload-turns.js';
import {
  firstPatchState,
  READ_STATE,
  type ServerInterceptorsModule,
  type StreamDecoderFields,
  serverCallPrototype,
} from './grpc-js-private.js';

/** grpc-js's server call as this patch reads it (private module). */
interface TurnTakingCall {
  handleDataFrame(this: TurnTakingCall, data: Buffer): void;
  stream: http2.ServerHttp2Stream;
  decoder: StreamDecoderFields;
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

const TURNS = Symbol('ibex upload turns');
const UPLOAD = Symbol('ibex upload turn');
const turnWaits = transportCount('uploadTurnWaits');

/** How many times a large upload was paused to wait for its connection's turn (metrics). */
export const uploadTurnWaits: () => number = turnWaits.read;

/**
 * Makes the large request messages (≥ {@link POOLED_MESSAGE_FROM_BYTES}) of each connection take turns
 * with `turns`: a chunk of a call whose turn it is not pauses that call until its turn; a complete
 * message, a message decided early (src/grpc/patches/early-decision.ts) or a closed stream passes the turn on.
 * grpc-js pauses and resumes the stream itself only between messages, so the resumes here cannot undo one
 * of its own pauses mid-message; a call cancelled or past its deadline meanwhile is simply not resumed.
 * Calling it again only swaps `turns`.
 * @param mod the module to patch (tests pass one without the method).
 * @throws GrpcJsInternalsChanged when grpc-js no longer has `handleDataFrame`.
 */
export function takeUploadTurns(turns: UploadTurns<UploadCall>, mod?: ServerInterceptorsModule): void {
  const proto = serverCallPrototype<TurnTakingCall & { [TURNS]?: { turns: UploadTurns<UploadCall> } }>(
    ['handleDataFrame'],
    mod,
  );
  const state = firstPatchState(proto, TURNS, { turns });
  if (state === null) return;
  const original = proto.handleDataFrame;
  proto.handleDataFrame = function handleDataFrame(this: TurnTakingCall, data: Buffer): void {
    original.call(this, data);
    const decoder = this.decoder;
    const { turns } = state;
    const stream = this.stream;
    const connection = stream.session ?? stream;
    let upload = this[UPLOAD];
    // A message decided early reads nothing more: its turn passes on now.
    if (upload && decoder?.readState === READ_STATE.DECIDED_EARLY) turns.done(connection, upload);
    // Set by the decoder from the message's prefix; it stays until the next message starts.
    if (!(decoder?.readMessageSize >= POOLED_MESSAGE_FROM_BYTES)) return;
    if (upload === undefined) {
      const created = new StreamUpload(stream, decoder);
      upload = created;
      this[UPLOAD] = created;
      stream.once('close', () => turns.done(connection, created));
    }
    if (decoder.readState !== READ_STATE.READING_MESSAGE) turns.done(connection, upload);
    else if (!turns.arrived(connection, upload)) turnWaits.add();
  };
}
