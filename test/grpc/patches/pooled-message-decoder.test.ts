/**
 * Large request messages are assembled in recycled buffers (src/util/message-buffers.ts) by the grpc-js
 * decoder hook (src/grpc/patches/pooled-message-decoder.ts), so a heavy upload adds no new external memory
 * for V8 to collect on the event loop. What must hold: the decoder frames every message exactly as grpc-js
 * does, however the bytes are split; and over real gRPC a second heavy call reuses the first one's buffer
 * and answers with its own history only. The pool itself: test/util/message-buffers.test.ts.
 */
import { createRequire } from 'node:module';
import { status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeBomb } from '../../../bench/lib/raw-assemble.js';
import { assembleLargeMessagesIn } from '../../../src/grpc/patches/pooled-message-decoder.js';
import {
  MESSAGE_BUFFERS,
  MessageBufferPool,
  POOLED_MESSAGE_FROM_BYTES,
} from '../../../src/util/message-buffers.js';
import { request, tenant, useTestService } from '../../e2e/harness.js';
import { assembleInWorker, decodeAnswer, encodeRequest } from '../../helpers/raw-grpc.js';

const MiB = 1 << 20;

/** A released request body as grpc-js would leave it: `bytes` of message after a 5-byte prefix. */
function grpcJsMessage(bytes: number, fill = 0): Buffer {
  return Buffer.alloc(bytes + 5, fill).subarray(5);
}

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
  /** A pool holding `n` free buffers of 2 MiB + 5 bytes. */
  const poolWith = (n: number) => {
    const pool = new MessageBufferPool();
    for (let i = 0; i < n; i++) pool.release(grpcJsMessage(2 * MiB));
    return pool;
  };
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
          assembleLargeMessagesIn(poolWith(4));
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
            // Large messages sit in a reused buffer; small ones take grpc-js's path.
            const pooled = message.length >= POOLED_MESSAGE_FROM_BYTES;
            expect(message.buffer.byteLength === 2 * MiB + 5).toBe(pooled);
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

describe('recycled request buffers over gRPC', () => {
  const svc = useTestService();

  it('a second 9.8 MB call reuses the first call’s buffer and answers with its own history only', async () => {
    const heavy = tenant();
    const call = async (ch: string) => {
      const recent = Array.from({ length: 100 }, () => ({ role: 'user', content: ch.repeat(32_768) }));
      const out = await assembleInWorker(
        svc().service.grpcAddr,
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
    // Each large message was either assembled in a free buffer or took grpc-js's path; the second at
    // least found the first one's buffer.
    const reused = MESSAGE_BUFFERS.stats.reused - before.reused;
    expect(reused + MESSAGE_BUFFERS.stats.missed - before.missed).toBe(2);
    expect(reused).toBeGreaterThanOrEqual(1);
    const lines = (text: string, ch: string) =>
      text.split('\n').filter((l) => l === `user: ${ch.repeat(32_768)}`).length;
    expect(lines(first, '绿')).toBe(100);
    expect(lines(second, '漢')).toBe(100);
    expect(second.includes('绿')).toBe(false);
  });

  it('concurrent heavy calls of several orgs on reused buffers: each answer holds its own history only', async () => {
    const chars = ['绿', '漢', '茶', '海', '山', '川'];
    const before = { ...MESSAGE_BUFFERS.stats };
    for (let round = 0; round < 2; round++) {
      const answers = await Promise.all(
        chars.slice(round * 3, round * 3 + 3).map(async (ch) => {
          const recent = Array.from({ length: 60 }, () => ({ role: 'user', content: ch.repeat(32_768) }));
          const out = await assembleInWorker(
            svc().service.grpcAddr,
            encodeRequest(request(tenant(), { recent_messages: recent })),
            20_000,
          );
          expect(out.code).toBe(status.OK);
          return { ch, text: decodeAnswer(out.body).assembled_context };
        }),
      );
      for (const { ch, text } of answers) {
        expect(text.split('\n').filter((l) => l === `user: ${ch.repeat(32_768)}`)).toHaveLength(60);
        for (const other of chars) if (other !== ch) expect(text.includes(other)).toBe(false);
      }
    }
    expect(MESSAGE_BUFFERS.stats.released - before.released).toBe(6);
    expect(MESSAGE_BUFFERS.stats.reused - before.reused).toBeGreaterThanOrEqual(3);
    // The same counters on /metrics (the test service's process is this one).
    const text = await (await fetch(`${svc().service.adminUrl}/metrics`)).text();
    const counter = (event: string) =>
      Number(
        text.match(new RegExp(`^ibex_context_message_buffers_total\\{event="${event}"\\} (\\d+)$`, 'm'))?.[1],
      );
    expect(counter('released')).toBe(MESSAGE_BUFFERS.stats.released);
    expect(counter('reused')).toBe(MESSAGE_BUFFERS.stats.reused);
    expect(text).toMatch(/^ibex_context_message_buffers_retained_bytes \d+$/m);
  });

  it('a refused 4 MB request (2,000,000 empty messages) hands its buffer back too', async () => {
    const before = { ...MESSAGE_BUFFERS.stats };
    for (let i = 0; i < 2; i++) {
      const t = tenant();
      const bomb = decodeBomb(t.org, t.agent, 2_000_000);
      const out = await assembleInWorker(svc().service.grpcAddr, bomb, 15_000);
      expect(out.code).toBe(status.INVALID_ARGUMENT);
      expect(out.details).toBe('recent_messages exceeds 100 items');
    }
    expect(MESSAGE_BUFFERS.stats.released - before.released).toBe(2);
    // Each large message was either assembled in a free buffer or took grpc-js's path; the second at
    // least found the first one's buffer.
    const reused = MESSAGE_BUFFERS.stats.reused - before.reused;
    expect(reused + MESSAGE_BUFFERS.stats.missed - before.missed).toBe(2);
    expect(reused).toBeGreaterThanOrEqual(1);
  });
});
