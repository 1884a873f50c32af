// Node keeps only the first `authorization`; a second (a proxy's) must be refused: docs/design/grpc-patches.md.
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
 * Hooks every HTTP/2 server `server` has bound, ahead of grpc-js's `stream` listener (after `bindAsync`).
 * @throws GrpcJsInternalsChanged when the private `http2Servers` map is gone.
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
