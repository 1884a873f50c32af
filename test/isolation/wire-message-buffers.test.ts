/**
 * Issue 9: large request messages are assembled in recycled buffers (src/util/message-buffers.ts, the
 * grpc-js decoder hook in src/server/grpc-internals.ts), so a heavy upload adds no new external memory for
 * V8 to collect on the event loop. What must hold: the decoder frames every message exactly as grpc-js
 * does, however the bytes are split; a recycled buffer never shows one request's bytes to the next
 * (released buffers are detached, stale tails zeroed); and over real gRPC a second heavy call reuses the
 * first one's buffer and answers with its own history only.
 */
import { createRequire } from 'node:module';
import { status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copySpliced, FROM_SOURCE } from '../../src/format/spliced.js';
import { assembleLargeMessagesIn } from '../../src/server/grpc-internals.js';
import { MESSAGE_BUFFERS } from '../../src/server/grpc-server.js';
import { MessageBufferPool, POOLED_MESSAGE_FROM_BYTES } from '../../src/util/message-buffers.js';
import { request, startTestService, type TestService, tenant } from '../e2e/harness.js';
import { assembleInWorker, decodeAnswer, decodeBomb, encodeRequest } from './wire-helpers.js';

const MiB = 1 << 20;

describe('MessageBufferPool', () => {
  it('hands out power-of-two buffers from 1 MiB to 16 MiB, null outside', () => {
    const pool = new MessageBufferPool();
    expect(pool.acquire(MiB - 1)).toBeNull();
    expect(pool.acquire(16 * MiB + 1)).toBeNull();
    const b = pool.acquire(3_000_000)!;
    expect(b.length).toBe(3_000_000);
    expect(b.byteOffset).toBe(0);
    expect(b.buffer.byteLength).toBe(4 * MiB);
    expect(pool.stats).toEqual({ reused: 0, allocated: 1, released: 0 });
  });

  it('a released buffer is detached everywhere and comes back with its stale tail zeroed', () => {
    const pool = new MessageBufferPool();
    const first = pool.acquire(3_000_000)!;
    first.fill(0xab);
    const message = first.subarray(5);
    expect(pool.release(message)).toBe(true);
    // Every view of the released buffer now reads as empty: nothing can read the next caller's bytes.
    expect(first.length).toBe(0);
    expect(message.length).toBe(0);
    expect(pool.retainedBytes).toBe(4 * MiB);

    const second = pool.acquire(2_100_000)!;
    expect(pool.stats).toEqual({ reused: 1, allocated: 1, released: 1 });
    expect(pool.retainedBytes).toBe(0);
    const whole = new Uint8Array(second.buffer);
    // The new message's own range still holds the old bytes (the decoder overwrites it all)...
    expect(whole[2_099_999]).toBe(0xab);
    // ...and everything the old message reached beyond it is zero.
    expect(whole.subarray(2_100_000, 3_000_000).every((x) => x === 0)).toBe(true);
  });

  it('takes back only its own sizes, never a detached buffer, and keeps at most its retention limit', () => {
    const pool = new MessageBufferPool(4 * MiB);
    expect(pool.release(Buffer.alloc(100))).toBe(false);
    expect(pool.release(new Uint8Array(3_000_000))).toBe(false);
    const a = pool.acquire(2 * MiB + 1)!;
    const b = pool.acquire(2 * MiB + 1)!;
    expect(pool.release(a)).toBe(true);
    expect(pool.release(a)).toBe(false);
    // Over the limit: left to the GC, still readable by whoever holds it.
    expect(pool.release(b)).toBe(false);
    expect(b.length).toBe(2 * MiB + 1);
  });
});

describe('spliced copy from a released buffer', () => {
  it('throws instead of leaving the target bytes as they were', () => {
    const pool = new MessageBufferPool();
    const source = pool.acquire(MiB)!;
    source.fill(0x61);
    const text = {
      own: new Uint8Array(0),
      source,
      spans: Uint32Array.of(FROM_SOURCE, 0, 10),
      byteLength: 10,
    };
    const target = new Uint8Array(10);
    expect(copySpliced(text, target, 0)).toBe(10);
    pool.release(source);
    expect(() => copySpliced(text, target, 0)).toThrow(/past its 0 bytes/);
  });
});

interface DecoderLike {
  write(data: Buffer): Buffer[];
}
const requireCjs = createRequire(import.meta.url);
const { StreamDecoder } = requireCjs('@grpc/grpc-js/build/src/stream-decoder.js') as {
  StreamDecoder: new (max: number) => DecoderLike;
};

function frame(body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

describe('grpc-js decoder with pooled large messages', () => {
  const pool = new MessageBufferPool();
  beforeAll(() => {
    assembleLargeMessagesIn(pool);
  });
  afterAll(() => {
    // Back to the server's pool, as every service in this process expects.
    assembleLargeMessagesIn(MESSAGE_BUFFERS);
  });

  it('frames every message as grpc-js does, however the bytes are split', () => {
    const sizes = fc.constantFrom(
      0,
      1,
      4,
      70_000,
      POOLED_MESSAGE_FROM_BYTES - 5,
      POOLED_MESSAGE_FROM_BYTES + 3,
    );
    fc.assert(
      fc.property(
        fc.array(fc.tuple(sizes, fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }),
        fc.array(fc.integer({ min: 1, max: 400_000 }), { minLength: 1, maxLength: 12 }),
        (messages, cuts) => {
          const bodies = messages.map(([n, seed]) => Buffer.alloc(n, seed));
          const wire = Buffer.concat(bodies.map(frame));
          const decoder = new StreamDecoder(-1);
          const out: Buffer[] = [];
          let at = 0;
          for (const cut of cuts) {
            if (at >= wire.length) break;
            out.push(...decoder.write(wire.subarray(at, Math.min(wire.length, at + cut))));
            at += cut;
          }
          if (at < wire.length) out.push(...decoder.write(wire.subarray(at)));
          expect(out).toHaveLength(bodies.length);
          out.forEach((message, i) => {
            expect(message.equals(frame(bodies[i]!))).toBe(true);
            // Large messages sit in a pooled buffer of their own; small ones take grpc-js's path.
            const pooled = message.length >= POOLED_MESSAGE_FROM_BYTES;
            const pooledSize = message.length <= MiB ? MiB : 2 * MiB;
            expect(message.buffer.byteLength === pooledSize).toBe(pooled);
          });
        },
      ),
      { numRuns: 60 },
    );
  });

  it('refuses a message over the limit with grpc-js own error', () => {
    const decoder = new StreamDecoder(10);
    expect(() => decoder.write(frame(Buffer.alloc(11)))).toThrow(
      'Received message larger than max (11 vs 10)',
    );
  });
});

describe('recycled request buffers over gRPC (issue 9)', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startTestService();
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('a second 9.8 MB call reuses the first call’s buffer and answers with its own history only', async () => {
    const heavy = tenant();
    const call = async (ch: string) => {
      const recent = Array.from({ length: 100 }, () => ({ role: 'user', content: ch.repeat(32_768) }));
      const out = await assembleInWorker(
        svc.service.grpcAddr,
        encodeRequest(request(heavy, { recent_messages: recent })),
        15_000,
      );
      expect(out.code).toBe(status.OK);
      return decodeAnswer(out.body).assembled_context;
    };
    const before = { ...MESSAGE_BUFFERS.stats };
    const first = await call('绿');
    const second = await call('漢');
    expect(MESSAGE_BUFFERS.stats.released - before.released).toBe(2);
    expect(MESSAGE_BUFFERS.stats.reused - before.reused).toBeGreaterThanOrEqual(1);
    const lines = (text: string, ch: string) =>
      text.split('\n').filter((l) => l === `user: ${ch.repeat(32_768)}`).length;
    expect(lines(first, '绿')).toBe(100);
    expect(lines(second, '漢')).toBe(100);
    expect(second.includes('绿')).toBe(false);
  });

  it('a refused 4 MB request (2,000,000 empty messages) hands its buffer back too', async () => {
    const before = { ...MESSAGE_BUFFERS.stats };
    for (let i = 0; i < 2; i++) {
      const t = tenant();
      const bomb = decodeBomb(t.org, t.agent, 2_000_000);
      const out = await assembleInWorker(svc.service.grpcAddr, bomb, 15_000);
      expect(out.code).toBe(status.INVALID_ARGUMENT);
      expect(out.details).toBe('recent_messages exceeds 100 items');
    }
    expect(MESSAGE_BUFFERS.stats.released - before.released).toBe(2);
    expect(MESSAGE_BUFFERS.stats.reused - before.reused).toBeGreaterThanOrEqual(1);
  });
});
