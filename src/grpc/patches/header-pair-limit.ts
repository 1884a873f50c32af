// Node refuses more header fields than `maxHeaderListPairs` before grpc-js's byte limit applies; grpc-js has
// no option for it (https://github.com/grpc/grpc-node/issues/2431). Why: see docs/design/grpc-patches.md.
import type { Server } from '@grpc/grpc-js';
import { GrpcJsInternalsChanged } from './grpc-js-private.js';

/**
 * Sets `server`'s HTTP/2 header-pair limit from its metadata limit `maxBytes` (a field costs ≥ 33 bytes, RFC
 * 9113 §6.5.2). Call before `bindAsync`. @throws GrpcJsInternalsChanged when `commonServerOptions` is gone.
 */
export function alignHeaderPairLimit(server: Server, maxBytes: number): void {
  const internal = server as unknown as { commonServerOptions?: { maxHeaderListPairs?: number } };
  if (typeof internal.commonServerOptions !== 'object' || internal.commonServerOptions === null)
    throw new GrpcJsInternalsChanged('no Server.commonServerOptions');
  internal.commonServerOptions.maxHeaderListPairs = 2 * Math.ceil(maxBytes / 32) + 16;
}
