// grpc-js has no hook between the HTTP/2 stream and its decoder. Why: see docs/design/grpc-patches.md.

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

interface TurnTakingCall {
  handleDataFrame(this: TurnTakingCall, data: Buffer): void;
  stream: http2.ServerHttp2Stream;
  decoder: StreamDecoderFields;
  [UPLOAD]?: StreamUpload;
}

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

export const uploadTurnWaits: () => number = turnWaits.read;

/**
 * Makes each connection's messages ≥ {@link POOLED_MESSAGE_FROM_BYTES} take turns: a call out of turn is
 * paused. @throws GrpcJsInternalsChanged when `handleDataFrame` is gone.
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
