/**
 * The CPU task inline (no threads): batch encoding, transfer lists, validation, and the deadline path.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { taskScalars } from '../../bench/lib/synthetic.js';
import { wrappedBlockTokens } from '../../src/budget/budget-calculator.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import {
  type CandidateFields,
  type CpuCandidate,
  type CpuTaskScalars,
  deadlineReserveMs,
  historyOf,
  runCpuTask,
  transferList,
  validateTaskInput,
} from '../../src/cpu-stage/cpu-task.js';
import { formatContext } from '../../src/format/formatter.js';
import { pack } from '../../src/pack/packer.js';
import { bpeCount } from '../../src/text/bpe.js';
import { generateNonce, nonceLength } from '../../src/text/nonce.js';
import { monotonicNow } from '../../src/util/clock.js';
import { splicedText } from '../../src/wire/spliced.js';

function scalars(over: Partial<CpuTaskScalars> = {}): CpuTaskScalars {
  return taskScalars({
    budget: 1000,
    nonce: 'n0nce',
    directive: 'Follow the house style.',
    recentMessages: [{ role: 'user', content: 'hi <there>' }],
    toolSchemas: ['{"name":"search"}'],
    ...over,
  });
}

const candidates: CpuCandidate[] = [
  {
    memory_id: 'b-2',
    category: 'factual',
    content: 'Paris is in France & <b>bold</b>',
    score: 0.9,
    similarity: 0.95,
    confidence: 0.6,
    rank: 1,
    tokens: 300,
  },
  {
    memory_id: 'a-1',
    category: 'préférence',
    content: '日本語の文章 😀 e\u0301',
    score: 0.9,
    similarity: 0.9,
    confidence: 0.9,
    rank: 2,
    tokens: 400,
  },
  {
    memory_id: 'c-3',
    category: 'procedural',
    content: '',
    score: 0.2,
    similarity: 0.2,
    confidence: 0.2,
    rank: 3,
    tokens: 500,
  },
];

describe('encodeCandidates', () => {
  it('lays every column and string into one buffer, byte-exact UTF-8 with 3n+1 offsets', () => {
    const input = encodeCandidates(candidates, scalars());
    expect(Array.from(input.score)).toEqual([0.9, 0.9, 0.2]);
    expect(Array.from(input.similarity)).toEqual([0.95, 0.9, 0.2]);
    expect(Array.from(input.confidence)).toEqual([0.6, 0.9, 0.2]);
    expect(Array.from(input.rank)).toEqual([1, 2, 3]);
    expect(Array.from(input.tokens)).toEqual([300, 400, 500]);
    expect(input.offsets.length).toBe(10);
    const text = Buffer.from(input.text);
    const fields = candidates.flatMap((c) => [c.memory_id, c.category, c.content]);
    fields.forEach((f, k) => {
      expect(text.toString('utf8', input.offsets[k], input.offsets[k + 1])).toBe(f);
    });
    expect(input.offsets[9]).toBe(Buffer.byteLength(fields.join(''), 'utf8'));
    expect(input.text.length).toBe(input.offsets[9]);
    // One buffer ⇒ one transfer.
    expect(transferList(input)).toEqual([input.score.buffer]);
    expect(input.budget).toBe(1000);
    expect(input.nonce).toBe('n0nce');
  });

  it('carries every scalar into the task, optional ones included (they are written out one by one)', () => {
    const all: Required<CpuTaskScalars> = {
      ...scalars({ directive: 'Be brief.', recentMessages: [{ role: 'user', content: 'hi' }] }),
      toolSchemas: ['{"name":"t"}'],
      historyCount: 0,
      historyContentPending: false,
      budgetModel: CapabilityCatalog.create().resolve('gpt-4o'),
      nonceBytes: 16,
      availableTokens: 512,
      packCount: 0,
      filters: { history: true, query: 'q', relevanceFloor: 0.15, relevanceWeight: 0.9, maxMemories: 3 },
      memoryDates: true,
    };
    // Required<…>: a key CpuTaskScalars gains must be listed here, and then encodeCandidates must carry it.
    const input = encodeCandidates([], all);
    for (const key of Object.keys(all) as (keyof CpuTaskScalars)[]) expect(input[key], key).toEqual(all[key]);
  });

  it('copies contents a retrieval thread sent as UTF-8 bytes: the same text and offsets as from strings', () => {
    const asStrings = encodeCandidates(candidates, scalars());
    const mixed = candidates.map(
      (c, i): CandidateFields => ({
        ...c,
        content: i === 1 ? c.content : new Uint8Array(Buffer.from(c.content)),
      }),
    );
    // Views on one shared buffer, as bytesInPlace builds them, at a non-zero offset.
    const shared = new Uint8Array(64);
    shared.set(mixed[0]!.content as Uint8Array, 7);
    mixed[0]!.content = shared.subarray(7, 7 + (mixed[0]!.content as Uint8Array).byteLength);
    const asBytes = encodeCandidates(mixed, scalars());
    expect(Array.from(asBytes.offsets)).toEqual(Array.from(asStrings.offsets));
    expect(Buffer.from(asBytes.text).equals(Buffer.from(asStrings.text))).toBe(true);
    // The source bytes are copied, not transferred: a cached hit's content stays readable.
    expect(shared.byteLength).toBe(64);
    expect(transferList(asBytes)).toEqual([asBytes.score.buffer]);
  });

  it('round-trips any ids, categories, contents and history (fields close together, apart or out of order)', () => {
    const text = fc.string({ unit: 'binary', maxLength: 80 });
    const message = fc.record({ role: text, content: text, gap: fc.nat(40) });
    fc.assert(
      fc.property(
        fc.array(fc.record({ memory_id: text, category: text, content: text }), { maxLength: 6 }),
        fc.array(message, { maxLength: 6 }),
        fc.boolean(),
        (fields, messages, reversed) => {
          // The history as a request holds it: each field's UTF-8 somewhere in one buffer, `gap` bytes apart.
          const parts: Buffer[] = [];
          const spans: number[] = [];
          let at = 0;
          for (const m of messages) {
            for (const f of [m.role, m.content]) {
              const b = Buffer.from(f);
              parts.push(Buffer.alloc(m.gap, 0xff), b);
              spans.push(at + m.gap, at + m.gap + b.length);
              at += m.gap + b.length;
            }
          }
          const source = new Uint8Array(Buffer.concat(parts));
          // Message order reversed: spans no longer ascend through the buffer.
          const order = messages.map((_, k) => k);
          if (reversed) order.reverse();
          const history = {
            source,
            spans: new Uint32Array(order.flatMap((k) => spans.slice(4 * k, 4 * k + 4))),
            count: messages.length,
            contentPending: false,
          };
          const cands = fields.map((f, i) => ({ ...f, score: i, similarity: 0, confidence: 0, rank: i }));
          const input = encodeCandidates(cands, scalars({ recentMessages: [] }), history);
          validateTaskInput(input);
          const bytes = Buffer.from(input.text);
          const utf8 = (s: string) => Buffer.from(s).toString();
          fields.forEach((f, i) => {
            const o = input.offsets;
            expect(bytes.toString('utf8', o[3 * i], o[3 * i + 1])).toBe(utf8(f.memory_id));
            expect(bytes.toString('utf8', o[3 * i + 1], o[3 * i + 2])).toBe(utf8(f.category));
            expect(bytes.toString('utf8', o[3 * i + 2], o[3 * i + 3])).toBe(utf8(f.content));
          });
          const expected = order.map((k) => ({
            role: utf8(messages[k]!.role),
            content: utf8(messages[k]!.content),
          }));
          expect(historyOf(input)).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('encodes an empty batch', () => {
    const input = encodeCandidates([], scalars());
    expect(input.score.length).toBe(0);
    expect(Array.from(input.offsets)).toEqual([0]);
    expect(() => validateTaskInput(input)).not.toThrow();
  });
});

describe('transferList', () => {
  it('lists each distinct buffer once and skips SharedArrayBuffers', () => {
    const own = new ArrayBuffer(64);
    const shared = new SharedArrayBuffer(16);
    const input = {
      ...scalars(),
      score: new Float64Array(own, 0, 1),
      similarity: new Float64Array(own, 8, 1),
      confidence: new Float64Array(1),
      relevance: new Float64Array(own, 16, 1),
      recency: new Float64Array(own, 24, 1),
      usefulness: new Float64Array(own, 40, 1),
      createdAt: new Float64Array(own, 48, 1),
      rank: new Int32Array(shared, 0, 1),
      tokens: new Int32Array(1),
      text: new Uint8Array(0),
      offsets: new Uint32Array([0, 0, 0, 0]),
      history: new Uint8Array(own, 32, 8),
      historySpans: new Uint32Array(0),
    };
    const list = transferList(input);
    // own (score + similarity + history), confidence, tokens, text, offsets, historySpans.
    expect(list).toHaveLength(6);
    expect(new Set(list).size).toBe(6);
    expect(list).toContain(own);
    expect(list).not.toContain(shared as unknown as ArrayBuffer);
  });
});

describe('validateTaskInput', () => {
  it('rejects a detached batch', () => {
    const input = encodeCandidates(candidates, scalars());
    structuredClone(input.score.buffer, { transfer: transferList(input) });
    expect(input.offsets.length).toBe(0);
    expect(() => validateTaskInput(input)).toThrow(/offsets has 0 entries, expected 1/);
  });

  it('rejects columns of different lengths and offsets past the text', () => {
    const input = encodeCandidates(candidates, scalars());
    expect(() => validateTaskInput({ ...input, rank: new Int32Array(2) })).toThrow(
      /rank has 2 entries, expected 3/,
    );
    expect(() => validateTaskInput({ ...input, text: input.text.subarray(0, 3) })).toThrow(/past the end/);
  });
});

describe('runCpuTask', () => {
  it('packs with the packer and formats the selection in packed order with the formatter', () => {
    const input = encodeCandidates(candidates, scalars({ budget: 700 }));
    const out = runCpuTask(input);
    const ids = candidates.map((c) => c.memory_id);
    const expected = pack({
      ids,
      scores: Float64Array.from(candidates, (c) => c.score),
      tokens: Int32Array.from(candidates, (c) => c.tokens),
      budget: 700,
      dpCellCeiling: 437_570,
      maxConsecutiveSkips: 5,
    });
    // Canonical order: score desc, then memory_id asc — 'a-1' before 'b-2' at equal scores.
    expect(Array.from(out.selected)).toEqual([1, 0]);
    expect(Array.from(out.selected)).toEqual(Array.from(expected.selected));
    expect(Array.from(out.excluded)).toEqual([2]);
    expect(out.pack).toEqual({
      path: 'dp',
      greedy_reason: null,
      total_tokens: 700,
      total_score: 1.8,
      skipped_count: 1,
      was_budget_reached: true,
      candidates_evaluated: 3,
      cells: expected.cells,
      source: expected.source,
    });
    const formatted = formatContext({
      directive: 'Follow the house style.',
      recentMessages: [{ role: 'user', content: 'hi <there>' }],
      memories: [1, 0].map((i) => candidates[i]!),
      toolSchemas: ['{"name":"search"}'],
      nonce: 'n0nce',
    });
    expect(out.assembled_context).toBe(formatted.assembled_context);
    expect(out.memories_included).toBe(2);
    expect(out.assembled_context).toContain('id="a-1" category="préférence">\n日本語の文章 😀 e\u0301\n');
    expect(out.assembled_context).toContain('Paris is in France &amp; &lt;b&gt;bold&lt;/b&gt;');
    expect(out.thread_id).toBe(0);
    expect(out.run_us).toBeGreaterThanOrEqual(out.pack_us);
    expect(out.started_at).toBeLessThanOrEqual(monotonicNow());
  });

  it('costs each candidate as wrappedBlockTokens does on its text: estimate kinds measured from the bytes, BPE from the text', () => {
    const html = '<div class="r"><a href="/x?a=1&b=2">link</a> &amp; <b>bold</b></div>\n';
    const heavy: CpuCandidate[] = [
      ...candidates,
      { ...candidates[0]!, memory_id: 'd-4', content: html.repeat(300) },
      { ...candidates[0]!, memory_id: 'e-5', content: '😀'.repeat(5000) },
      { ...candidates[0]!, memory_id: 'f-6', content: '用户 <喝> & 😀 \uD800 '.repeat(200) },
      { ...candidates[0]!, memory_id: 'g-7', category: 'a"b<c>&\'', content: 'x' },
    ];
    const gpt = CapabilityCatalog.create().resolve('gpt-4o');
    for (const kind of ['chars_div_4', 'runes_div_3_5', 'bpe_o200k_base'] as const) {
      const budgetModel = { ...gpt, policy: { ...gpt.policy, estimate_kind: kind } };
      const out = runCpuTask(encodeCandidates(heavy, scalars({ budgetModel, nonceBytes: 16 })));
      const nonce = 'n0nce';
      // The lone surrogate travels as U+FFFD (UTF-8 has no surrogates); the expected cost is that text's.
      const expected = heavy.map((c) =>
        wrappedBlockTokens(
          { ...c, content: Buffer.from(c.content).toString('utf8') },
          nonceLength(16),
          kind,
          nonce,
        ),
      );
      expect(Array.from(out.costs), kind).toEqual(expected);
    }
  });

  it("under BPE, tokens_used is the budget's sum of the answer's parts: never below the count of the answer, a few tokens above (property)", () => {
    const gpt = CapabilityCatalog.create().resolve('gpt-4o');
    const piece = fc.oneof(
      fc.string({ maxLength: 12 }),
      fc.string({ unit: 'grapheme', maxLength: 6 }),
      fc.constantFrom(
        '\n',
        '\n\n',
        '  ',
        '\t',
        '\r\n',
        '<',
        '>',
        '&',
        '"',
        "'s ",
        '</ibex_memory>',
        '日本語',
        '😀',
        ' 12345',
      ),
    );
    const text = fc.array(piece, { maxLength: 12 }).map((p) => p.join(''));
    const candidate = fc.record({
      category: fc.constantFrom('factual', 'episodic', 'a"b<c>'),
      content: text,
    });
    let widest = 0;
    fc.assert(
      fc.property(
        fc.constantFrom('bpe_o200k_base', 'bpe_cl100k_base'),
        fc.array(candidate, { minLength: 0, maxLength: 6 }),
        fc.option(text, { nil: null }),
        fc.array(fc.record({ role: fc.constantFrom('user', 'assistant'), content: text }), { maxLength: 3 }),
        fc.array(text, { maxLength: 2 }),
        fc.boolean(),
        (kind, rows, directive, recentMessages, toolSchemas, memoryDates) => {
          const budgetModel = { ...gpt, policy: { ...gpt.policy, estimate_kind: kind } };
          const cands: CpuCandidate[] = rows.map((r, i) => ({
            ...candidates[0]!,
            memory_id: `m-${i}`,
            category: r.category,
            content: r.content,
            created_at_ms: Date.UTC(2024, 0, 1) + i * 86_400_000,
          }));
          const out = runCpuTask(
            encodeCandidates(
              cands,
              scalars({
                budgetModel,
                nonceBytes: 16,
                nonce: generateNonce(16),
                directive,
                recentMessages,
                toolSchemas,
                memoryDates,
              }),
            ),
          );
          const counted = bpeCount(splicedText(out.assembled_utf8!), kind);
          expect(out.tokens_used).toBeGreaterThanOrEqual(counted);
          widest = Math.max(widest, out.tokens_used! - counted);
        },
      ),
      { numRuns: 200 },
    );
    // The nonce charged its characters, one token per section join and the last joiner: tens, not hundreds.
    expect(widest).toBeLessThanOrEqual(64);
  });

  it('finishes on the greedy path, reason deadline, when the deadline is already inside the reserve', () => {
    const many: CpuCandidate[] = Array.from({ length: 200 }, (_, i) => ({
      memory_id: `m-${String(i).padStart(3, '0')}`,
      category: 'factual',
      content: `memory ${i}`,
      score: ((i * 37) % 100) / 100,
      similarity: 0.5,
      confidence: 0.5,
      rank: i + 1,
      tokens: 500 + ((i * 131) % 4500),
    }));
    const input = encodeCandidates(
      many,
      scalars({ budget: 100_000, dpCellCeiling: 10_000_000, deadline: monotonicNow() + 0.5 }),
    );
    const out = runCpuTask(input);
    expect(out.pack.path).toBe('greedy');
    expect(out.pack.greedy_reason).toBe('deadline');
    expect(out.pack.cells).toBe(200 * 6251);
    expect(out.pack.total_tokens).toBeLessThanOrEqual(100_000);
    expect(out.selected.length + out.excluded.length).toBe(200);
  });

  it('reserves at least 1 ms, more for more content to format', () => {
    expect(deadlineReserveMs(0)).toBe(1);
    expect(deadlineReserveMs(400_000)).toBeGreaterThan(deadlineReserveMs(1000));
  });
});
