/**
 * Code points and escaped length are counted in one pass without building copies. These
 * pin the fast measures to the slow, obviously right definitions (spread into code points; the escaped copy).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  escapeAttr,
  escapeBody,
  escapedCodePointLength,
  escapedUtf8CodePoints,
} from '../../src/text/escape.js';
import { codePointLength } from '../../src/text/estimate.js';

/** Strings mixing ASCII markup, BMP text, astral characters and lone surrogates. */
const text = fc.oneof(
  fc.string({ unit: 'binary' }),
  fc.string({ unit: fc.constantFrom('&', '<', '>', '"', "'", 'a', '😀', '绿', '\uD800', '\uDC00') }),
);

describe('fast text measures', () => {
  it('codePointLength equals the number of code points for…of yields', () => {
    fc.assert(
      fc.property(text, (t) => {
        expect(codePointLength(t)).toBe([...t].length);
      }),
    );
  });

  it('escapedCodePointLength equals the code points of the escaped copy, body and attribute', () => {
    fc.assert(
      fc.property(text, (t) => {
        expect(escapedCodePointLength(t)).toBe([...escapeBody(t)].length);
        expect(escapedCodePointLength(t, true)).toBe([...escapeAttr(t)].length);
      }),
    );
  });

  it('escapedUtf8CodePoints equals the code points of the escaped decoded text, for any span of any bytes', () => {
    // Long runs of the byte classes it counts (continuation bytes, `&`, `<`, `>`) and their neighbours
    // (`=`, `?`, `'`, `"`, 0xc0-0xff lead bytes), around the 32-byte word-loop threshold and lane sums.
    const bytes = fc.oneof(
      fc.uint8Array({ maxLength: 600, size: 'max' }),
      fc
        .array(
          fc.constantFrom(0x26, 0x3c, 0x3e, 0x3d, 0x3f, 0x27, 0x22, 0x80, 0xbf, 0xc3, 0xe2, 0xf0, 0x61),
          {
            maxLength: 2_000,
          },
        )
        .map((a) => Uint8Array.from(a)),
      text.map((t) => new Uint8Array(Buffer.from(t, 'utf8'))),
      // Long well-formed markup: the SWAR pass itself (malformed spans are decoded instead).
      fc
        .string({
          unit: fc.constantFrom('&', '<', '>', '=', '?', '"', 'a', '😀', '绿', 'é', '\uD800'),
          minLength: 40,
          maxLength: 400,
          size: 'max',
        })
        .map((t) => new Uint8Array(Buffer.from(t, 'utf8'))),
    );
    fc.assert(
      fc.property(bytes, fc.nat(), fc.nat(), fc.nat({ max: 7 }), (b, x, y, pad) => {
        // Copied behind `pad` bytes, so spans start at every alignment of the word view.
        const buf = Buffer.alloc(pad + b.length);
        buf.set(b, pad);
        // A short cut from each end (< 8 bytes), so most spans are long enough for the word loop.
        const start = pad + Math.min(b.length, x % 8);
        const end = Math.max(start, pad + b.length - (y % 8));
        const decoded = buf.toString('utf8', start, end);
        expect(escapedUtf8CodePoints(buf, start, end)).toBe([...escapeBody(decoded)].length);
      }),
      { numRuns: 1000 },
    );
  });

  it('escapedUtf8CodePoints counts 32,768 emoji and dense markup exactly, past a lane sum of 255 words', () => {
    const emoji = Buffer.from('😀'.repeat(32_768));
    expect(escapedUtf8CodePoints(emoji, 0, emoji.length)).toBe(32_768);
    const markup = Buffer.from('<b>&</b>'.repeat(1000));
    expect(escapedUtf8CodePoints(markup, 0, markup.length)).toBe('&lt;b&gt;&amp;&lt;/b&gt;'.length * 1000);
    const mixed = Buffer.from('用户 <喝> & 😀 '.repeat(500));
    expect(escapedUtf8CodePoints(mixed, 3, mixed.length - 1)).toBe(
      [...escapeBody(mixed.toString('utf8', 3, mixed.length - 1))].length,
    );
  });

  it('counts the largest contents exactly: 32,768 emoji, a lone surrogate at the end, dense markup', () => {
    expect(codePointLength('😀'.repeat(32_768))).toBe(32_768);
    expect(codePointLength(`${'😀'.repeat(3)}\uD83D`)).toBe(4);
    expect(escapedCodePointLength('<b>&</b>'.repeat(1000))).toBe('&lt;b&gt;&amp;&lt;/b&gt;'.length * 1000);
  });
});
