// grpc-js only deserializes whole messages, so its call is wrapped. Why: see docs/design/grpc-patches.md.

import http2 from 'node:http2';
import { transportCount } from '../../telemetry/transport-counters.js';
import {
  firstPatchState,
  type PrefixScanner,
  READ_STATE,
  SCAN_FOR,
  type ServerInterceptorsModule,
  type StreamDecoderFields,
  serverCallPrototype,
} from './grpc-js-private.js';

export type { PrefixScanner } from './grpc-js-private.js';

export interface MethodHandler {
  path?: string;
  deserialize?: (bytes: Buffer) => unknown;
}

interface EarlyDecidedCall {
  handleDataFrame(this: EarlyDecidedCall, data: Buffer): void;
  handleEndEvent(this: EarlyDecidedCall): void;
  stream: http2.ServerHttp2Stream;
  decoder: StreamDecoderFields;
  handler?: MethodHandler;
  [ENDED_EARLY]?: boolean;
}

type ScannerFor = (handler: MethodHandler) => (() => PrefixScanner) | null;

const DECIDES = Symbol('ibex early decisions');
const ENDED_EARLY = Symbol('ibex request ended early');
const decidedEarly = transportCount('requestsDecidedEarly');

export const requestsDecidedEarly: () => number = decidedEarly.read;

/**
 * Follows large messages (≥ `POOLED_MESSAGE_FROM_BYTES`) of methods `scannerFor` has a scanner for; once a
 * prefix decides, grpc-js gets it as the whole message, the rest is dropped unread and the stream reset with
 * NO_ERROR after the answer (RFC 9113 §8.1). @throws GrpcJsInternalsChanged when a wrapped method is gone.
 */
export function decideRequestsOnTheWire(scannerFor: ScannerFor, mod?: ServerInterceptorsModule): void {
  const proto = serverCallPrototype<EarlyDecidedCall & { [DECIDES]?: { scannerFor: ScannerFor } }>(
    ['handleDataFrame', 'handleEndEvent'],
    mod,
  );
  const state = firstPatchState(proto, DECIDES, { scannerFor });
  if (state === null) return;
  const originalData = proto.handleDataFrame;
  const originalEnd = proto.handleEndEvent;
  proto.handleDataFrame = function handleDataFrame(this: EarlyDecidedCall, data: Buffer): void {
    const decoder = this.decoder;
    if (decoder && decoder[SCAN_FOR] === undefined)
      decoder[SCAN_FOR] = this.handler ? state.scannerFor(this.handler) : null;
    originalData.call(this, data);
    if (decoder?.readState !== READ_STATE.DECIDED_EARLY || this[ENDED_EARLY]) return;
    this[ENDED_EARLY] = true;
    decidedEarly.add();
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
