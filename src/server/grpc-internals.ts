/**
 * What the gRPC server sets on grpc-js 1.14's private fields, because grpc-js exposes no option for it:
 * the HTTP/2 header-pair limit (issue 11), and session teardown on a
 * forced drain (issue 10). Each hook throws when the field it needs is gone, so a grpc-js upgrade that
 * moves them fails at start-up, not silently.
 */
import http2 from 'node:http2';
import type { Server } from '@grpc/grpc-js';

/**
 * Issue 11 item 5: Node's HTTP/2 layer refuses a header list of more than `maxHeaderListPairs` (default
 * 128) fields with ENHANCE_YOUR_CALM ("Bandwidth exhausted or memory limit exceeded", ~118 entries or
 * ~4.6 KB) long before the byte limit. Every field costs at least 33 bytes (RFC 9113 §6.5.2: 32 + a name),
 * so `maxBytes / 32` pairs plus the pseudo-headers can never cut a request the byte limit allows; twice
 * that lets a request moderately over it reach {@link metadataLimitInterceptor} and its own message.
 * grpc-js exposes no channel option for this, so it is set on the options grpc-js passes to
 * `http2.createServer` at bind time (private field `commonServerOptions`, grpc-js 1.14).
 */
export function alignHeaderPairLimit(server: Server, maxBytes: number): void {
  const internal = server as unknown as { commonServerOptions?: { maxHeaderListPairs?: number } };
  if (internal.commonServerOptions === undefined)
    throw new Error('grpc-js internals changed: no commonServerOptions');
  internal.commonServerOptions.maxHeaderListPairs = 2 * Math.ceil(maxBytes / 32) + 16;
}

/**
 * grpc-js 1.14 `forceShutdown` destroys only the sessions channelz tracked: with `grpc.enable_channelz: 0`
 * (issue 10) in-flight calls would stay open past the drain grace. So the drain destroys every session
 * grpc-js keeps per HTTP/2 server (private field `http2Servers`) itself, with CANCEL as grpc-js does.
 */
export function destroySessions(server: Server): void {
  const internal = server as unknown as {
    http2Servers?: Map<unknown, { sessions?: Set<http2.ServerHttp2Session> }>;
  };
  for (const info of internal.http2Servers?.values() ?? []) {
    for (const session of info.sessions ?? []) session.destroy(undefined, http2.constants.NGHTTP2_CANCEL);
  }
}
