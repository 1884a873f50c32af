/**
 * Every grpc-js patch in src/grpc/patches/: it applies to the installed grpc-js, applying it again changes
 * nothing but its parameter (the method on the prototype stays the same function), and it throws
 * GrpcJsInternalsChanged when the private field or method it needs is gone, so an upgrade that moves one
 * fails at start-up instead of silently doing without. What each patch does is tested with real gRPC calls
 * beside the module each one serves (test/grpc/, test/grpc/patches/, test/auth/) and in test/e2e/.
 */
import { createRequire } from 'node:module';
import { Server } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { exposeDuplicateAuthorization } from '../../../src/grpc/patches/duplicate-authorization.js';
import { decideRequestsOnTheWire } from '../../../src/grpc/patches/early-decision.js';
import { sendGatheredMessages } from '../../../src/grpc/patches/gathered-send.js';
import {
  GrpcJsInternalsChanged,
  type ServerInterceptorsModule,
} from '../../../src/grpc/patches/grpc-js-private.js';
import { alignHeaderPairLimit } from '../../../src/grpc/patches/header-pair-limit.js';
import { assembleLargeMessagesIn } from '../../../src/grpc/patches/pooled-message-decoder.js';
import { takeUploadTurns } from '../../../src/grpc/patches/upload-turns.js';
import { UploadTurns } from '../../../src/grpc/upload-turns.js';
import { MessageBufferPool } from '../../../src/util/message-buffers.js';

const requireCjs = createRequire(import.meta.url);
const serverCall = (
  requireCjs('@grpc/grpc-js/build/src/server-interceptors.js') as {
    BaseServerInterceptingCall: { prototype: Record<string, unknown> };
  }
).BaseServerInterceptingCall.prototype;
const streamDecoder = (
  requireCjs('@grpc/grpc-js/build/src/stream-decoder.js') as {
    StreamDecoder: { prototype: Record<string, unknown> };
  }
).StreamDecoder.prototype;

/** A server-interceptors module whose call class lacks `method`. */
function without(method: string): ServerInterceptorsModule {
  class Call {}
  for (const m of ['sendMessage', 'handleDataFrame', 'handleEndEvent'])
    if (m !== method) (Call.prototype as unknown as Record<string, unknown>)[m] = () => {};
  return { BaseServerInterceptingCall: Call as unknown as { prototype: Record<string, unknown> } };
}

describe('grpc-js patches', () => {
  it('header-pair limit: set on the options grpc-js binds with; detected when the field is gone', () => {
    const server = new Server();
    alignHeaderPairLimit(server, 16 * 1024);
    const options = (server as unknown as { commonServerOptions: { maxHeaderListPairs: number } })
      .commonServerOptions;
    expect(options.maxHeaderListPairs).toBe(2 * 512 + 16);
    alignHeaderPairLimit(server, 16 * 1024);
    expect(options.maxHeaderListPairs).toBe(1040);
    expect(() => alignHeaderPairLimit({} as Server, 1024)).toThrow(GrpcJsInternalsChanged);
    server.forceShutdown();
  });

  it('duplicate authorization: detected when Server.http2Servers is gone', () => {
    const server = new Server();
    // Bound or not, the map is there.
    expect(() => exposeDuplicateAuthorization(server)).not.toThrow();
    expect(() => exposeDuplicateAuthorization({} as Server)).toThrow(GrpcJsInternalsChanged);
    server.forceShutdown();
  });

  it('pooled decoder: replaces StreamDecoder.write once; detected when a field or the method is gone', () => {
    const pool = new MessageBufferPool();
    assembleLargeMessagesIn(pool);
    const write = streamDecoder.write;
    assembleLargeMessagesIn(new MessageBufferPool());
    expect(streamDecoder.write).toBe(write);
    expect(() => assembleLargeMessagesIn(pool, {})).toThrow(GrpcJsInternalsChanged);
    class Renamed {
      readState = 0;
      write() {
        return [];
      }
    }
    expect(() => assembleLargeMessagesIn(pool, { StreamDecoder: Renamed as unknown as never })).toThrow(
      /StreamDecoder has no maxReadMessageLength/,
    );
  });

  it('gathered send: wraps sendMessage once; detected when the method is gone', () => {
    sendGatheredMessages(() => null);
    const send = serverCall.sendMessage;
    sendGatheredMessages(() => null);
    expect(serverCall.sendMessage).toBe(send);
    expect(() => sendGatheredMessages(() => null, without('sendMessage'))).toThrow(GrpcJsInternalsChanged);
  });

  it('early decision: wraps handleDataFrame and handleEndEvent once; detected when either is gone', () => {
    decideRequestsOnTheWire(() => null);
    const [data, end] = [serverCall.handleDataFrame, serverCall.handleEndEvent];
    decideRequestsOnTheWire(() => null);
    expect([serverCall.handleDataFrame, serverCall.handleEndEvent]).toEqual([data, end]);
    expect(() => decideRequestsOnTheWire(() => null, without('handleEndEvent'))).toThrow(
      /no BaseServerInterceptingCall.handleEndEvent/,
    );
    expect(() => decideRequestsOnTheWire(() => null, {})).toThrow(GrpcJsInternalsChanged);
  });

  it('upload turns: wraps handleDataFrame once; detected when it is gone', () => {
    takeUploadTurns(new UploadTurns());
    const data = serverCall.handleDataFrame;
    takeUploadTurns(new UploadTurns());
    expect(serverCall.handleDataFrame).toBe(data);
    expect(() => takeUploadTurns(new UploadTurns(), without('handleDataFrame'))).toThrow(
      /no BaseServerInterceptingCall.handleDataFrame/,
    );
  });
});
