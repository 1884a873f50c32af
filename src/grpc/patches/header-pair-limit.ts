/**
 * Node's HTTP/2 layer refuses a header list of more than `maxHeaderListPairs` fields (default 128) with
 * ENHANCE_YOUR_CALM long before the byte limit (`grpc.max_metadata_size`) is reached, so a request moderately
 * over the byte limit never gets the metadata interceptor's own answer. grpc-js has no option for it
 * (upstream: https://github.com/grpc/grpc-node/issues/2431, open), so it is set on the options grpc-js
 * passes to `http2.createServer` at bind time: the private field `commonServerOptions`.
 */
import type { Server } from '@grpc/grpc-js';
import { GrpcJsInternalsChanged } from './grpc-js-private.js';

/**
 * Sets the HTTP/2 header-pair limit of `server` from its metadata byte limit. Every field costs at least
 * 33 bytes (RFC 9113 §6.5.2: 32 + a name), so `maxBytes / 32` pairs plus the pseudo-headers can never cut
 * a request the byte limit allows; twice that lets a request moderately over it reach the interceptor.
 * Call before `bindAsync`. Idempotent (it sets a value).
 * @param maxBytes the server's metadata limit, bytes.
 * @throws GrpcJsInternalsChanged when `server` has no `commonServerOptions`.
 */
export function alignHeaderPairLimit(server: Server, maxBytes: number): void {
  const internal = server as unknown as { commonServerOptions?: { maxHeaderListPairs?: number } };
  if (typeof internal.commonServerOptions !== 'object' || internal.commonServerOptions === null)
    throw new GrpcJsInternalsChanged('no Server.commonServerOptions');
  internal.commonServerOptions.maxHeaderListPairs = 2 * Math.ceil(maxBytes / 32) + 16;
}
