/**
 * A request with two `authorization` headers (a proxy appending its own token after a client's) must be
 * refused, but Node's HTTP/2 layer treats `authorization` as a single-value header and keeps only the first
 * in the headers object grpc-js builds its Metadata from, so the bearer interceptor never sees the second.
 * The raw header list is still passed to the HTTP/2 server's `stream` event (4th argument), so a listener
 * that runs before grpc-js's puts every value back: the Metadata then carries them all and
 * `bearerAuthInterceptor` answers UNAUTHENTICATED (`duplicate`). grpc-js exposes neither its HTTP/2
 * servers nor the raw headers; no upstream issue asks for it on the server side (the client side refuses
 * a second value since https://github.com/grpc/grpc-node/pull/1275), because it is a policy of this
 * service, not a grpc-js bug. The private access is the `http2Servers` map of a bound Server.
 */
import type http2 from 'node:http2';
import type { Server } from '@grpc/grpc-js';
import { GrpcJsInternalsChanged } from './grpc-js-private.js';

const AUTHORIZATION = 'authorization';
const HOOKED = Symbol('ibex.duplicateAuthorizationHooked');

/** Restores every `authorization` value of `rawHeaders` ([name, value, name, value, …]) into `headers`. */
export function restoreDuplicateAuthorization(
  headers: http2.IncomingHttpHeaders,
  rawHeaders: readonly string[] | undefined,
): void {
  if (!Array.isArray(rawHeaders)) return;
  const values: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (String(rawHeaders[i]).toLowerCase() === AUTHORIZATION) values.push(String(rawHeaders[i + 1]));
  }
  // Typed as a single string by Node; grpc-js turns an array into one metadata entry per value.
  if (values.length > 1) (headers as Record<string, unknown>)[AUTHORIZATION] = values;
}

/**
 * Hooks every HTTP/2 server a grpc-js Server has bound (call after each `bindAsync`; idempotent). grpc-js
 * 1.14 keeps them in the private `http2Servers` map and registers its own `stream` listener at bind, so
 * ours is prepended to run first.
 * @throws GrpcJsInternalsChanged when grpc-js no longer has that map (an upgrade changed its internals): better a failed
 *   start-up than silently accepting a second token.
 */
export function exposeDuplicateAuthorization(server: Server): void {
  const internal = server as unknown as {
    http2Servers?: Map<http2.Http2Server & { [HOOKED]?: true }, unknown>;
  };
  if (!(internal.http2Servers instanceof Map)) {
    throw new GrpcJsInternalsChanged('no Server.http2Servers map to check duplicate authorization on');
  }
  for (const h2 of internal.http2Servers.keys()) {
    if (h2[HOOKED]) continue;
    h2[HOOKED] = true;
    h2.prependListener('stream', (_stream, headers, _flags, rawHeaders?: string[]) =>
      restoreDuplicateAuthorization(headers, rawHeaders),
    );
  }
}
