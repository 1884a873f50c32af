/**
 * The receive governor (src/server/receive-governor.ts, issue 9): a connection's request messages of
 * 1 MiB or more are read at most at its rate past one burst; small messages and other connections are
 * never held back. The bucket is checked with an injected clock; the pacing over gRPC on loopback by a
 * lower bound only (a loaded machine can make calls slower, never faster than the bucket allows).
 */
import { Client, credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { Errors } from '../../src/errors.js';
import { receivePauses } from '../../src/server/grpc-internals.js';
import { createGrpcServer, type GrpcServer } from '../../src/server/grpc-server.js';
import { contextServiceDefinition } from '../../src/server/proto.js';
import { ReceiveGovernor } from '../../src/server/receive-governor.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { encodeRequest } from './wire-helpers.js';

describe('ReceiveGovernor', () => {
  it('lets a burst through, then asks for pauses that pay back the excess at the rate', () => {
    let now = 0;
    const g = new ReceiveGovernor({ bytesPerSecond: 2e6, burstBytes: 10e6 }, () => now);
    const a = {};
    const b = {};
    expect(g.take(a, 6e6)).toBe(0);
    // 2 MB over the bucket at 2 MB/s: one second.
    expect(g.take(a, 6e6)).toBe(1000);
    // Another connection has its own bucket.
    expect(g.take(b, 10e6)).toBe(0);
    now = 1000;
    expect(g.take(a, 0)).toBe(0);
    expect(g.take(a, 2000)).toBe(1);
    // Refill stops at the burst.
    now = 60_000;
    expect(g.take(a, 10e6)).toBe(0);
    expect(g.take(a, 2e6)).toBe(1000);
    expect(g.pauses).toBe(3);
  });

  it('rate 0 is off: nothing is ever paused', () => {
    const g = new ReceiveGovernor({ bytesPerSecond: 0, burstBytes: 1 });
    expect(g.enabled).toBe(false);
    expect(g.take({}, 1e9)).toBe(0);
    expect(g.pauses).toBe(0);
  });
});

const MAX_MESSAGE = 8 * 1024 * 1024;
const RATE_MB_PER_S = 4;

let server: GrpcServer | null = null;
afterEach(async () => {
  await server?.drain(500);
  server = null;
});

/** Answers every call INVALID_ARGUMENT `received <n> messages`: proof the whole request was read. */
async function startServer(): Promise<string> {
  server = createGrpcServer({
    assemble: async (req) => {
      throw Errors.invalidArgument('query', `received ${req.history.count} messages`);
    },
    logger: createLogger({ logLevel: 'silent' }),
    settings: {
      timeoutMs: 30_000,
      maxReceiveMessageBytes: MAX_MESSAGE,
      maxMetadataBytes: 16 * 1024,
      largeMessageReceiveMbPerS: RATE_MB_PER_S,
    },
  });
  const port = await server.bind('127.0.0.1:0');
  server.markServing();
  return `127.0.0.1:${port}`;
}

/** A valid request of `messages` history messages of 32,768 ASCII characters (≈ 32 KiB each). */
function bigRequest(messages: number): Buffer {
  return encodeRequest({
    org_id: '11111111-1111-4111-8111-111111111111',
    agent_id: '22222222-2222-4222-8222-222222222222',
    model: 'gpt-4o',
    query: 'q',
    recent_messages: Array.from({ length: messages }, () => ({ role: 'user', content: 'a'.repeat(32_768) })),
  });
}

/** A client on a connection of its own (no subchannel shared with other clients of this process). */
function ownConnection(addr: string): Client {
  return new Client(addr, credentials.createInsecure(), {
    'grpc.max_send_message_length': -1,
    'grpc.use_local_subchannel_pool': 1,
  });
}

/** Sends raw request bytes; resolves with the status details and when the call ended (ms). */
function send(client: Client, bytes: Buffer): Promise<{ code: number; details: string; at: number }> {
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      contextServiceDefinition.AssembleContext!.path,
      (b: Buffer) => b,
      (b: Buffer) => b,
      bytes,
      new Metadata(),
      { deadline: Date.now() + 30_000 },
      (err: ServiceError | null) =>
        resolve({ code: err?.code ?? status.OK, details: err?.details ?? '', at: performance.now() }),
    );
  });
}

describe('large messages over gRPC are paced per connection', () => {
  it('four 3 MB requests on one connection take at least their excess over the burst at the rate; a small call on another connection is not held', async () => {
    const addr = await startServer();
    const big = bigRequest(96);
    expect(big.length).toBeGreaterThan(3_100_000);
    const heavy = ownConnection(addr);
    const light = ownConnection(addr);
    try {
      // Connections up first, so that only the messages are timed.
      await Promise.all([send(heavy, bigRequest(1)), send(light, bigRequest(1))]);
      const pausesBefore = receivePauses();
      const start = performance.now();
      const paced = Promise.all([1, 2, 3, 4].map(() => send(heavy, big)));
      await new Promise((r) => setTimeout(r, 200));
      const small = await send(light, bigRequest(2));
      const done = await paced;
      for (const r of done)
        expect(r).toMatchObject({
          code: status.INVALID_ARGUMENT,
          details: expect.stringContaining('received 96 messages'),
        });
      expect(small.details).toContain('received 2 messages');
      // 4 × ~3.15 MB past an 8 MiB burst at 4 MB/s: the last byte cannot arrive before ~1.05 s.
      const excess = 4 * big.length - MAX_MESSAGE;
      const floorMs = (excess / (RATE_MB_PER_S * 1e6)) * 1000;
      const last = Math.max(...done.map((r) => r.at));
      expect(last - start).toBeGreaterThanOrEqual(floorMs * 0.9);
      // The other connection's call went through while the heavy one was held back.
      expect(small.at).toBeLessThan(last);
      // What /metrics reports as ibex_context_receive_pauses_total.
      expect(receivePauses()).toBeGreaterThan(pausesBefore);
    } finally {
      heavy.close();
      light.close();
    }
  });
});
