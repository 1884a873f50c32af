/**
 * What the gRPC server sets on grpc-js 1.14's private fields, because grpc-js exposes no option for it:
 * the HTTP/2 header-pair limit (issue 11), session teardown on a
 * forced drain (issue 10), and sending a response frame the CPU stage built as it is (issue 9). Each hook throws when the field it needs is gone, so a grpc-js upgrade that
 * moves them fails at start-up, not silently.
 */
import http2 from 'node:http2';
import { createRequire } from 'node:module';
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

/** grpc-js 1.14's server call that serializes and frames each response (private module). */
interface BaseServerCallPrototype {
  serializeMessage(this: unknown, value: unknown): Buffer;
}

let framesInstalled = false;
let framesSent = 0;

/** How many responses this process sent as prebuilt frames (tests: which path an answer took). */
export function prebuiltFramesSent(): number {
  return framesSent;
}

/**
 * Issue 9 (isolation): grpc-js 1.14 frames every response in `BaseServerInterceptingCall.serializeMessage`
 * with a fresh `Buffer.allocUnsafe(byteLength + 5)` and a copy of the serialized message — for a ~10 MB
 * context a 10 MB allocation (page faults) and a 10 MB copy on the main thread per answer. grpc-js has no
 * option to send bytes as they are, so its method is wrapped once per process: a value for which
 * `prebuilt` returns a frame (the CPU stage's answer frame, src/format/answer-frame.ts) is sent as that
 * frame; every other value goes through the original method. Idempotent.
 * @param prebuilt the whole gRPC frame (5-byte prefix + message) for `value`, or null.
 * @throws Error when grpc-js no longer has the method.
 */
export function sendPrebuiltFrames(prebuilt: (value: unknown) => Buffer | null): void {
  if (framesInstalled) return;
  const require = createRequire(import.meta.url);
  const mod = require('@grpc/grpc-js/build/src/server-interceptors.js') as {
    BaseServerInterceptingCall?: { prototype: BaseServerCallPrototype };
  };
  const proto = mod.BaseServerInterceptingCall?.prototype;
  if (typeof proto?.serializeMessage !== 'function')
    throw new Error('grpc-js internals changed: no BaseServerInterceptingCall.serializeMessage');
  const original = proto.serializeMessage;
  proto.serializeMessage = function serializeMessage(value: unknown): Buffer {
    const frame = prebuilt(value);
    if (frame === null) return original.call(this, value);
    framesSent++;
    return frame;
  };
  framesInstalled = true;
}
