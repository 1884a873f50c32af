/**
 * The pool of recycled large-message buffers (src/util/message-buffers.ts): it never allocates, and a
 * recycled buffer never shows one request's bytes to the next (released buffers are detached, stale tails
 * zeroed). The grpc-js decoder that fills them: test/grpc/patches/pooled-message-decoder.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { MessageBufferPool } from '../../src/util/message-buffers.js';
import { copySpliced, FROM_SOURCE } from '../../src/wire/spliced.js';

const MiB = 1 << 20;

/** A released request body as grpc-js would leave it: `bytes` of message after a 5-byte prefix. */
function grpcJsMessage(bytes: number, fill = 0): Buffer {
  return Buffer.alloc(bytes + 5, fill).subarray(5);
}

describe('MessageBufferPool', () => {
  it('never allocates: a large message finds a free buffer that fits or takes grpc-js own path', () => {
    const pool = new MessageBufferPool();
    expect(pool.acquire(3_000_000)).toBeNull();
    expect(pool.release(grpcJsMessage(2_999_995))).toBe(true);
    expect(pool.acquire(MiB - 1)).toBeNull();
    expect(pool.acquire(3_000_001)).toBeNull();
    const b = pool.acquire(2_100_000)!;
    expect(b.length).toBe(2_100_000);
    expect(b.byteOffset).toBe(0);
    expect(b.buffer.byteLength).toBe(3_000_000);
    expect(pool.stats).toEqual({ reused: 1, missed: 2, released: 1 });
  });

  it('a released buffer is detached everywhere and comes back with its stale tail zeroed', () => {
    const pool = new MessageBufferPool();
    const message = grpcJsMessage(2_999_995, 0xab);
    const whole = Buffer.from(message.buffer);
    expect(pool.release(message)).toBe(true);
    // Every view of the released buffer now reads as empty: nothing can read the next caller's bytes.
    expect(message.length).toBe(0);
    expect(whole.length).toBe(0);
    expect(pool.retainedBytes).toBe(3_000_000);

    const next = pool.acquire(2_100_000)!;
    expect(pool.retainedBytes).toBe(0);
    const all = new Uint8Array(next.buffer);
    // The new message's own range still holds the old bytes (the decoder overwrites it all)...
    expect(all[2_099_999]).toBe(0xab);
    // ...and everything the old message reached beyond it is zero.
    expect(all.subarray(2_100_000).every((x) => x === 0)).toBe(true);
  });

  it('reuses the smallest free buffer that fits', () => {
    const pool = new MessageBufferPool();
    pool.release(grpcJsMessage(4 * MiB));
    pool.release(grpcJsMessage(2 * MiB));
    pool.release(grpcJsMessage(3 * MiB));
    expect(pool.acquire(2 * MiB + 100)!.buffer.byteLength).toBe(3 * MiB + 5);
    expect(pool.acquire(MiB)!.buffer.byteLength).toBe(2 * MiB + 5);
    expect(pool.acquire(MiB)!.buffer.byteLength).toBe(4 * MiB + 5);
  });

  it('takes back only large message buffers, never a detached one, and keeps at most its limit', () => {
    const pool = new MessageBufferPool(4 * MiB);
    expect(pool.release(Buffer.alloc(100))).toBe(false);
    expect(pool.release(grpcJsMessage(MiB - 100))).toBe(false);
    // A view deep inside someone's buffer is not a message.
    expect(pool.release(new Uint8Array(new ArrayBuffer(3 * MiB), 100, MiB))).toBe(false);
    const a = grpcJsMessage(2 * MiB);
    const b = grpcJsMessage(2 * MiB);
    expect(pool.release(a)).toBe(true);
    expect(pool.release(a)).toBe(false);
    // Over the limit: left to the GC, still readable by whoever holds it.
    expect(pool.release(b)).toBe(false);
    expect(b.length).toBe(2 * MiB);
  });
});

describe('spliced copy from a released buffer', () => {
  it('throws instead of leaving the target bytes as they were', () => {
    const pool = new MessageBufferPool();
    const source = grpcJsMessage(MiB, 0x61);
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
