/**
 * The CPU stage measures and formats history on its UTF-8 bytes. Every measure must equal
 * decode-then-count (Node's decoder: U+FFFD for each invalid sequence), and the spliced context must be
 * byte for byte what the string formatter makes of the decoded history, with the same `tokens_used`.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { calculateBudget } from '../../src/budget/budget-calculator.js';
import type { ResolvedModel } from '../../src/budget/catalog.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { decodeSpans, formatAssembly, prepareHistory } from '../../src/format/assembly-text.js';
import { formatContext } from '../../src/format/formatter.js';
import { type ByteMemory, measureHistory } from '../../src/format/history-utf8.js';
import { escapedUtf8CodePoints } from '../../src/text/escape.js';
import { codePointLength, estimateTokens } from '../../src/text/estimate.js';
import { continuationBytes, isUtf8Span, utf8CodePointCount } from '../../src/text/utf8.js';
import { splicedText } from '../../src/wire/spliced.js';

const decodedCodePoints = (b: Uint8Array) => [...Buffer.from(b).toString('utf8')].length;

/** Byte arrays: arbitrary, and valid UTF-8 of mixed widths with invalid bytes sprinkled in. */
const bytes = fc.oneof(
  fc.uint8Array({ maxLength: 300 }),
  fc
    .array(
      fc.oneof(
        fc.string({ unit: fc.constantFrom('a', 'é', '漢', '😀', ' ', '\n') }).map((s) => Buffer.from(s)),
        fc.uint8Array({ maxLength: 3 }),
      ),
      { maxLength: 40 },
    )
    .map((parts) => new Uint8Array(Buffer.concat(parts))),
);

describe('UTF-8 byte counters', () => {
  it('count what decode-then-count gives, at any offset (aligned or not) of any buffer', () => {
    fc.assert(
      fc.property(bytes, fc.nat(7), fc.nat(7), (b, lead, trail) => {
        const buf = new Uint8Array(lead + b.length + trail);
        buf.set(b, lead);
        const view = buf.subarray(1 > lead ? 0 : 1); // an unaligned view too
        const start = lead - (lead >= 1 ? 1 : 0);
        expect(utf8CodePointCount(view, start, start + b.length)).toBe(decodedCodePoints(b));
        // Valid exactly when decoding and encoding again gives the same bytes (nothing was replaced).
        const roundTrip = Buffer.from(Buffer.from(b).toString('utf8'), 'utf8');
        expect(isUtf8Span(view, start, start + b.length)).toBe(roundTrip.equals(Buffer.from(b)));
      }),
      { numRuns: 2000 },
    );
  });

  it('count continuation bytes exactly over long spans (word loop and both ends)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 3000 }), fc.nat(9), (b, cut) => {
        const start = Math.min(cut, b.length);
        let expected = 0;
        for (let i = start; i < b.length; i++) if ((b[i]! & 0xc0) === 0x80) expected++;
        expect(continuationBytes(b, start, b.length)).toBe(expected);
      }),
    );
  });

  it('count the largest message contents: 32,768 emoji or CJK characters', () => {
    const emoji = Buffer.from('😀'.repeat(32_768));
    const cjk = Buffer.from('漢'.repeat(32_768));
    expect(utf8CodePointCount(emoji, 0, emoji.length)).toBe(32_768);
    expect(utf8CodePointCount(cjk, 3, cjk.length)).toBe(32_767);
  });
});

/** History spans over one buffer from (role bytes, content bytes) pairs. */
function spansOf(messages: [Uint8Array, Uint8Array][]) {
  const parts: Uint8Array[] = [Buffer.from('pre')];
  const spans = new Uint32Array(4 * messages.length);
  let at = 3;
  messages.forEach(([r, c], i) => {
    spans.set([at, at + r.length, at + r.length, at + r.length + c.length], 4 * i);
    at += r.length + c.length;
    parts.push(r, c);
  });
  return { source: new Uint8Array(Buffer.concat(parts)), spans, count: messages.length };
}

const role = fc.oneof(fc.constantFrom('user', ' assistant ', '', '  ', 'tool'), fc.string({ maxLength: 6 }));
const message = fc.tuple(
  role.map((r) => new Uint8Array(Buffer.from(r))),
  fc.oneof(bytes, fc.constant(new Uint8Array(0))),
);
const resolved = (model: string): ResolvedModel => CapabilityCatalog.load(undefined).resolve(model);

describe('history on bytes', () => {
  it('measures the history text (contract.md §5) as the decoded text counts', () => {
    fc.assert(
      fc.property(fc.array(message, { maxLength: 8 }), (messages) => {
        const h = spansOf(messages);
        const decoded = decodeSpans(h);
        const text = decoded.map((m) => `${m.role}: ${m.content}`).join('\n');
        const m = measureHistory(h);
        expect(m.codePoints).toBe(codePointLength(text));
        expect(Array.from(m.contentCodePoints)).toEqual(decoded.map((d) => codePointLength(d.content)));
      }),
    );
  });

  it('formats the context byte for byte as the string formatter, with the same budget and tokens_used', () => {
    fc.assert(
      fc.property(
        fc.array(message, { maxLength: 8 }),
        fc.option(fc.constantFrom('Be brief.', '  ', 'Réponds 😀')),
        fc.array(fc.constantFrom('{"t":1}', ' ', 'tool <b>'), { maxLength: 2 }),
        fc.boolean(),
        fc.constantFrom('gpt-4o', 'claude-sonnet-4-5'),
        (messages, directive, tools, withMemory, model) => {
          const h = spansOf(messages);
          const decoded = decodeSpans(h);
          const memories = withMemory ? [{ memory_id: 'm1', category: 'factual', content: 'a <b> & c' }] : [];
          const parts = { directive, memories, toolSchemas: tools, nonce: 'N0nce' };
          const r = resolved(model);
          const kind = r.policy.estimate_kind;
          const prepared = prepareHistory(h, kind, true)!;
          expect(prepared.measure).not.toBeNull();
          const f = formatAssembly(h, prepared, kind, parts);
          const expected = formatContext({ ...parts, recentMessages: decoded }).assembled_context;
          expect(splicedText(f.text)).toBe(expected);
          expect(f.text.byteLength).toBe(Buffer.byteLength(expected));
          expect(f.tokens_used).toBe(estimateTokens(expected, kind));
          const budgetInput = { model: r, directive, toolSchemas: tools, nonceBytes: 16 };
          expect(calculateBudget({ ...budgetInput, recentMessages: prepared.measure! })).toEqual(
            calculateBudget({ ...budgetInput, recentMessages: decoded }),
          );
        },
      ),
      { numRuns: 500 },
    );
  });

  it('escapes memory contents from their bytes exactly as the string formatter escapes the text', () => {
    const text = fc.oneof(
      fc.string({ unit: fc.constantFrom('a', '&', '<', '>', '"', "'", 'é', '漢', '😀', '\n', ' ') }),
      fc.string({ unit: 'binary', maxLength: 40 }),
    );
    // Long contents too: the entity scan and the copy on either side of the 256-byte measure threshold.
    const content = fc.oneof(
      text,
      text.map((t) => t.repeat(40)),
    );
    const memory = fc.record({
      memory_id: text,
      category: fc.oneof(fc.constantFrom('factual', 'episodic', 'procedural', 'zeta'), text),
      content,
      asBytes: fc.boolean(),
      pad: fc.nat(7),
    });
    fc.assert(
      fc.property(
        fc.array(memory, { maxLength: 6 }),
        fc.array(message, { maxLength: 3 }),
        fc.constantFrom('gpt-4o', 'claude-sonnet-4-5'),
        (ms, messages, model) => {
          const h = spansOf(messages);
          const kind = resolved(model).policy.estimate_kind;
          const prepared = prepareHistory(h, kind, true)!;
          // Byte contents sit at some offset of a shared buffer, as in a CPU task's batch.
          const memories = ms.map((m) => {
            if (!m.asBytes) return { memory_id: m.memory_id, category: m.category, content: m.content };
            const buf = Buffer.concat([
              Buffer.alloc(m.pad, 0x3c),
              Buffer.from(m.content),
              Buffer.alloc(3, 0x26),
            ]);
            const end = buf.length - 3;
            const byteMemory: ByteMemory = {
              memory_id: m.memory_id,
              category: m.category,
              bytes: buf,
              start: m.pad,
              end,
              escapedCodePoints: escapedUtf8CodePoints(buf, m.pad, end),
            };
            return byteMemory;
          });
          const parts = { directive: 'Be brief.', toolSchemas: [], nonce: 'N0nce' };
          const f = formatAssembly(h, prepared, kind, { ...parts, memories });
          const textMemories = ms.map((m) => ({
            memory_id: m.memory_id,
            category: m.category,
            // The text a byte content stands for: the string as UTF-8 decodes (lone surrogates → U+FFFD).
            content: m.asBytes ? Buffer.from(m.content).toString() : m.content,
          }));
          const expected = formatContext({
            ...parts,
            memories: textMemories,
            recentMessages: decodeSpans(h),
          }).assembled_context;
          expect(splicedText(f.text)).toBe(expected);
          expect(f.text.byteLength).toBe(Buffer.byteLength(expected));
          expect(f.tokens_used).toBe(estimateTokens(expected, kind));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('refuses a content over 32,768 code points and accepts one at the limit', () => {
    const at = spansOf([[Buffer.from('user'), Buffer.from('漢'.repeat(32_768))]]);
    const over = spansOf([[Buffer.from('user'), Buffer.from('a'.repeat(32_769))]]);
    expect(prepareHistory(at, 'chars_div_4', true)).not.toBeNull();
    expect(prepareHistory(over, 'chars_div_4', true)).toBeNull();
    expect(prepareHistory(over, 'bpe_o200k_base', true)).toBeNull();
  });
});
