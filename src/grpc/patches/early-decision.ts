/**
 * Decides a large request from a prefix of its bytes (contract.md §11: counts are checked on the wire, at a cost
 * independent of the count). grpc-js hands the deserializer only a complete message, so the private
 * `BaseServerInterceptingCall.handleDataFrame` and `handleEndEvent` are wrapped, and the decoder patch
 * (src/grpc/patches/pooled-message-decoder.ts) runs the scanner as bytes arrive. No upstream issue or PR asks
 * grpc-js for incremental deserialization or an early answer (searched grpc/grpc-node); it follows this
 * service's request format, not a grpc-js bug.
 */

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

/** What grpc-js keeps of a registered method (`handler` of a server call). */
export interface MethodHandler {
  path?: string;
  deserialize?: (bytes: Buffer) => unknown;
}

/** grpc-js's server call as this patch reads it (private module). */
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

/** How many requests this process decided from a prefix of their bytes (tests, metrics). */
export const requestsDecidedEarly: () => number = decidedEarly.read;

/**
 * A large request message (≥ `POOLED_MESSAGE_FROM_BYTES`, uncompressed) of a method for which `scannerFor`
 * returns a scanner (it is asked with the method's handler, whose deserializer the scanner must match) is
 * followed as its DATA frames arrive. Once the scanner says the bytes so far decide the outcome, grpc-js
 * is handed that prefix as the whole message and the request as ended: the handler runs on it and
 * answers through the interceptors as for any other call (metrics, logs), the rest of the upload is
 * dropped unread, and once the answer is sent the stream is reset with NO_ERROR, which RFC 9113 §8.1
 * provides for a server that answered before the request ended, so the client stops sending. Calling it
 * again only swaps the choice of scanner.
 * @param scannerFor the scanner factory for a registered method, or null for methods that have none.
 * @param mod the module to patch (tests pass one without a method).
 * @throws GrpcJsInternalsChanged when grpc-js no longer has the methods it wraps.
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
