/**
 * Issue 9 item 5: code points and escaped length are counted in one pass without building copies. These
 * pin the fast measures to the slow, obviously right definitions (spread into code points; the escaped copy).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { codePointLength } from '../../src/budget/estimate.js';
import { escapeAttr, escapeBody, escapedCodePointLength } from '../../src/format/escape.js';

/** Strings mixing ASCII markup, BMP text, astral characters and lone surrogates. */
const text = fc.oneof(
  fc.string({ unit: 'binary' }),
  fc.string({ unit: fc.constantFrom('&', '<', '>', '"', "'", 'a', '😀', '绿', '\uD800', '\uDC00') }),
);

describe('fast text measures (issue 9 item 5)', () => {
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

  it('counts the issue sizes exactly: 32,768 emoji, a lone surrogate at the end, dense markup', () => {
    expect(codePointLength('😀'.repeat(32_768))).toBe(32_768);
    expect(codePointLength(`${'😀'.repeat(3)}\uD83D`)).toBe(4);
    expect(escapedCodePointLength('<b>&</b>'.repeat(1000))).toBe('&lt;b&gt;&amp;&lt;/b&gt;'.length * 1000);
  });
});
