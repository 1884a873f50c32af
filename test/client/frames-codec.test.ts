/**
 * The `frames` transport's codec (src/client/h2-codec.ts, issue 10): frames come out of a byte stream
 * whole and in order however the reads cut it, and the request header blocks we encode decode (with
 * hpack.js, as a server would) to exactly the fields we meant.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MAX_FRAME,
  dataOf,
  FrameReader,
  frame,
  headerFragment,
  literalHeaderBlock,
} from '../../src/client/h2-codec.js';
import { HeaderDecoder, keepsTable } from '../../src/client/hpack-reader.js';

interface Seen {
  type: number;
  flags: number;
  id: number;
  payload: string;
}

function collect(chunks: Buffer[]): Seen[] {
  const seen: Seen[] = [];
  const reader = new FrameReader({
    onFrame: (type, flags, id, payload) => seen.push({ type, flags, id, payload: payload.toString('hex') }),
  });
  for (const c of chunks) reader.feed(c);
  return seen;
}

describe('FrameReader', () => {
  it('hands on every frame whole and in order, whatever the read boundaries', () => {
    const frameArb = fc.record({
      type: fc.integer({ min: 0, max: 9 }),
      flags: fc.integer({ min: 0, max: 255 }),
      id: fc.integer({ min: 0, max: 0x7fffffff }),
      payload: fc.uint8Array({ maxLength: 300 }),
    });
    fc.assert(
      fc.property(
        fc.array(frameArb, { maxLength: 12 }),
        fc.array(fc.nat(4000), { maxLength: 20 }),
        (frames, cuts) => {
          const wire = Buffer.concat(frames.map((f) => frame(f.type, f.flags, f.id, Buffer.from(f.payload))));
          const points = [...new Set(cuts.map((c) => c % (wire.length + 1)))].sort((a, b) => a - b);
          const chunks: Buffer[] = [];
          let from = 0;
          for (const p of [...points, wire.length]) {
            chunks.push(wire.subarray(from, p));
            from = p;
          }
          expect(collect(chunks)).toEqual(
            frames.map((f) => ({ ...f, payload: Buffer.from(f.payload).toString('hex') })),
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it('one byte per read still gives the frames; a frame over the max size is an error', () => {
    const wire = Buffer.concat([frame(1, 4, 1, Buffer.from('abc')), frame(0, 1, 1, Buffer.alloc(0))]);
    const bytes = [...wire].map((b) => Buffer.from([b]));
    expect(collect(bytes)).toEqual([
      { type: 1, flags: 4, id: 1, payload: '616263' },
      { type: 0, flags: 1, id: 1, payload: '' },
    ]);
    const big = frame(0, 0, 1, Buffer.alloc(DEFAULT_MAX_FRAME + 1));
    expect(() => collect([big])).toThrow(/frame of 16385 bytes exceeds SETTINGS_MAX_FRAME_SIZE 16384/);
  });

  it('strips padding and priority from HEADERS and padding from DATA, and refuses padding past the end', () => {
    // PADDED (pad 2) + PRIORITY (5 bytes) + fragment "hi" + 2 pad bytes.
    const headers = Buffer.from([2, 0, 0, 0, 3, 16, 0x68, 0x69, 0, 0]);
    expect(headerFragment(1, 0x8 | 0x20, headers).toString()).toBe('hi');
    expect(dataOf(0x8, Buffer.from([1, 0x41, 0x42, 0])).toString()).toBe('AB');
    expect(() => dataOf(0x8, Buffer.from([5, 1]))).toThrow(/padding/);
    expect(() => headerFragment(1, 0x8, Buffer.from([9, 1]))).toThrow(/padding/);
  });
});

describe('request header blocks', () => {
  it('decode to the fields encoded, long values and never-indexed secrets included', () => {
    const fields: [string, string][] = [
      [':method', 'POST'],
      [':path', '/ibex.context.v1.ContextService/AssembleContext'],
      ['authorization', `Bearer ${'t'.repeat(300)}`],
      ['grpc-timeout', '1000m'],
      ['x-long', 'v'.repeat(20_000)],
    ];
    const block = literalHeaderBlock(fields, new Set(['authorization']));
    const decoder = new HeaderDecoder();
    expect([...decoder.decode(block)]).toEqual(fields);
    // The same block again: literal fields leave no state, so it decodes the same.
    expect([...decoder.decode(block)]).toEqual(fields);
    // Never indexed (0x10) for the token, without indexing (0x00) for the rest.
    expect(block[0]).toBe(0x00);
    const name = block.indexOf('authorization');
    expect([block[name - 2], block[name - 1]]).toEqual([0x10, 13]);
  });

  it('a malformed block is an error, not a crash', () => {
    expect(() => new HeaderDecoder().decode(Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff]))).toThrow(
      /malformed header block/,
    );
  });
});

describe('the decoded-block cache', () => {
  const lit = (first: number, name: string, value: string) =>
    Buffer.from([first, name.length, ...Buffer.from(name), value.length, ...Buffer.from(value)]);

  it('serves a repeated block from the cache only while the dynamic table stays as it was', () => {
    const d = new HeaderDecoder();
    // x-a: 1 enters the dynamic table at index 62 (incremental indexing).
    expect([...d.decode(lit(0x40, 'x-a', '1'))]).toEqual([['x-a', '1']]);
    const ref = Buffer.from([0x80 | 62]);
    expect(keepsTable(ref)).toBe(true);
    const first = d.decode(ref);
    expect([...first]).toEqual([['x-a', '1']]);
    expect(d.decode(ref)).toBe(first);
    // x-b: 2 enters at 62 and pushes x-a: 1 to 63: the same bytes now mean another field.
    expect(keepsTable(lit(0x40, 'x-b', '2'))).toBe(false);
    d.decode(lit(0x40, 'x-b', '2'));
    expect([...d.decode(ref)]).toEqual([['x-b', '2']]);
    expect([...d.decode(Buffer.from([0x80 | 63]))]).toEqual([['x-a', '1']]);
  });

  it('tells table changes from literals that leave it alone', () => {
    expect(
      keepsTable(Buffer.concat([lit(0x00, 'x-c', '3'), lit(0x10, 'x-d', '4'), Buffer.from([0x88])])),
    ).toBe(true);
    // Indexed name (content-type, 31) without indexing: 0x0f 0x10 (31 = 15 + 16), then the value.
    expect(keepsTable(Buffer.from([0x0f, 0x10, 1, 0x61]))).toBe(true);
    expect(keepsTable(Buffer.from([0x3f, 0xe1, 0x1f]))).toBe(false); // table size update
    expect(keepsTable(Buffer.from([0x00, 5, 0x61]))).toBe(false); // a name longer than the block
  });
});
