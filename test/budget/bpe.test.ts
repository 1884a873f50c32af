/**
 * Exact token counts (contract.md §5/§6): the `bpe_*` kinds count like tiktoken with special-token
 * text as ordinary text, IBEX_CONTEXT_EXACT_TOKENS selects them for the OpenAI families, the per-memory
 * cache is bounded, and the budget invariant holds with exact counts on the A/B cases and on
 * generated prompts.
 */
import fc from 'fast-check';
import cl100k from 'gpt-tokenizer/encoding/cl100k_base';
import o200k from 'gpt-tokenizer/encoding/o200k_base';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { blockCacheStats, configureBlockCache } from '../../src/budget/bpe-cache.js';
import { calculateBudget, wrappedBlockTokens } from '../../src/budget/budget-calculator.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { exactTokensSetting } from '../../src/config/settings.js';
import { formatContext } from '../../src/format/formatter.js';
import { pack } from '../../src/pack/packer.js';
import { MAX_EXACT_CHUNK, warmBpe } from '../../src/text/bpe.js';
import { type EstimateKind, estimateFromLength, estimateTokens } from '../../src/text/estimate.js';
import { generateNonce } from '../../src/text/nonce.js';
import { runJsonCommand } from '../../src/tools/cli/json-commands.js';

const ORDINARY = { allowedSpecial: new Set<string>(), disallowedSpecial: new Set<string>() };
const CJK_2000 = '中文日本語'.repeat(400);
const FAMILY_500 = '👨‍👩‍👧‍👦'.repeat(500);
const ONES_HISTORY = [{ role: 'user', content: '1\n'.repeat(20_000) }];

// Loading both encodings takes about a second, several on a loaded machine: outside the tests' timeouts.
beforeAll(() => warmBpe(), 60_000);

describe('exact counts: the bpe_* kinds', () => {
  it('counts ordinary text exactly (what the tokenizer itself returns)', () => {
    const prose = 'The quick brown fox, jumps over the lazy dog! 123456 中文，日本語。 '.repeat(200);
    expect(estimateTokens(prose, 'bpe_o200k_base')).toBe(o200k.countTokens(prose, ORDINARY));
    expect(estimateTokens(prose, 'bpe_cl100k_base')).toBe(cl100k.countTokens(prose, ORDINARY));
    expect(estimateTokens('1\n'.repeat(20_000), 'bpe_cl100k_base')).toBe(40_000);
  });

  it('counts the issue A/B texts (one long pre-token chunk each) within two tokens per 256-character cut', () => {
    // The tokenizer's exact counts, against which chars_div_4 estimates 500 and 875.
    expect(o200k.countTokens(CJK_2000, ORDINARY)).toBe(1200);
    expect(cl100k.countTokens(CJK_2000, ORDINARY)).toBe(2400);
    expect(o200k.countTokens(FAMILY_500, ORDINARY)).toBe(5500);
    expect(cl100k.countTokens(FAMILY_500, ORDINARY)).toBe(9000);
    expect(estimateTokens(CJK_2000, 'chars_div_4')).toBe(500);
    expect(estimateTokens(FAMILY_500, 'chars_div_4')).toBe(875);
    // Ours never undercounts them; the margin plus the cut itself add at most two tokens per cut.
    const cases: [string, EstimateKind, number][] = [
      [CJK_2000, 'bpe_o200k_base', 1200],
      [CJK_2000, 'bpe_cl100k_base', 2400],
      [FAMILY_500, 'bpe_o200k_base', 5500],
      [FAMILY_500, 'bpe_cl100k_base', 9000],
    ];
    for (const [text, kind, exact] of cases) {
      const ours = estimateTokens(text, kind);
      expect(ours).toBeGreaterThanOrEqual(exact);
      expect(ours - exact).toBeLessThanOrEqual(2 * Math.ceil(text.length / MAX_EXACT_CHUNK));
    }
  });

  it('bounds the cost of one huge pre-token chunk (BPE on it is quadratic) and never undercounts it', () => {
    // 'a' × 32,768 is one chunk: 4,096 tokens exactly, 1.6 s to find out. Pieces of 256 + 1 per cut.
    const text = 'a'.repeat(32_768);
    expect(estimateTokens(text, 'bpe_o200k_base')).toBe(32 * 128 + 127);
    expect(estimateTokens(text, 'bpe_cl100k_base')).toBe(32 * 128 + 127);
  });

  it('never undercounts text with long pre-token chunks (property)', () => {
    const runChar = fc.constantFrom('a', 'b', 'e', 'é', 'Z', '中', '語', '-', '=', ' ', '\n', '/', '1');
    fc.assert(
      fc.property(
        fc.array(fc.tuple(runChar, fc.integer({ min: 1, max: 400 })), { minLength: 1, maxLength: 6 }),
        fc.constantFrom<EstimateKind>('bpe_o200k_base', 'bpe_cl100k_base'),
        (runs, kind) => {
          const text = runs.map(([c, k]) => c.repeat(k)).join('');
          const exact = (kind === 'bpe_o200k_base' ? o200k : cl100k).countTokens(text, ORDINARY);
          expect(estimateTokens(text, kind)).toBeGreaterThanOrEqual(exact);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('counts special-token text as ordinary text instead of refusing it', () => {
    // tiktoken encode_ordinary("<|endoftext|>") is 7 tokens in both encodings: '<', '|', 'endo', ...
    expect(estimateTokens('<|endoftext|>', 'bpe_cl100k_base')).toBe(7);
    expect(estimateTokens('<|endoftext|>', 'bpe_o200k_base')).toBe(7);
    expect(estimateTokens('hello world', 'bpe_o200k_base')).toBe(2);
    expect(estimateTokens('', 'bpe_o200k_base')).toBe(0);
  });

  it('refuses to estimate a bpe kind from a length alone', () => {
    expect(() => estimateFromLength(10, 'bpe_o200k_base')).toThrow(/counts text, not a length/);
  });

  it('the JSON estimate command takes an explicit estimate_kind over the family', () => {
    expect(runJsonCommand('estimate', { text: CJK_2000, tokenizer_family: 'o200k_base' })).toEqual({
      tokens: 500,
      estimate_kind: 'chars_div_4',
    });
    expect(
      runJsonCommand('estimate', {
        text: CJK_2000,
        tokenizer_family: 'o200k_base',
        estimate_kind: 'bpe_cl100k_base',
      }),
    ).toEqual({ tokens: estimateTokens(CJK_2000, 'bpe_cl100k_base'), estimate_kind: 'bpe_cl100k_base' });
    expect(() =>
      runJsonCommand('estimate', { text: 'x', tokenizer_family: 'claude', estimate_kind: 'bpe_p50k' }),
    ).toThrow(/^estimate_kind: /);
  });
});

describe('exact counts: catalog selection (IBEX_CONTEXT_EXACT_TOKENS)', () => {
  it('switches o200k_base and cl100k_base to their encodings and leaves claude on runes_div_3_5', () => {
    const exact = CapabilityCatalog.create([], { exactTokens: true });
    expect(exact.family('o200k_base').estimate_kind).toBe('bpe_o200k_base');
    expect(exact.family('cl100k_base').estimate_kind).toBe('bpe_cl100k_base');
    expect(exact.family('claude').estimate_kind).toBe('runes_div_3_5');
    expect(exact.family('unknown').estimate_kind).toBe('chars_div_4');
    expect(CapabilityCatalog.create().family('o200k_base').estimate_kind).toBe('chars_div_4');
  });

  it('reads IBEX_CONTEXT_EXACT_TOKENS as a boolean word, default false, and names it when invalid', () => {
    expect(exactTokensSetting({})).toBe(false);
    expect(exactTokensSetting({ IBEX_CONTEXT_EXACT_TOKENS: ' TRUE ' })).toBe(true);
    expect(exactTokensSetting({ IBEX_CONTEXT_EXACT_TOKENS: '0' })).toBe(false);
    expect(() => exactTokensSetting({ IBEX_CONTEXT_EXACT_TOKENS: 'maybe' })).toThrow(
      /^IBEX_CONTEXT_EXACT_TOKENS/,
    );
  });

  it('accepts a bpe kind from a catalog file', () => {
    const file = {
      schema_version: 1,
      models: [],
      families: [
        { tokenizer_family: 'o200k_base', estimate_kind: 'bpe_o200k_base', safety_buffer_fraction: 0.02 },
      ],
    };
    expect(CapabilityCatalog.create([file]).family('o200k_base').estimate_kind).toBe('bpe_o200k_base');
  });
});

describe('exact counts: per-memory cache', () => {
  beforeEach(() => configureBlockCache(2));

  it('hits on the same id and content, misses when the content changes, and stays bounded', () => {
    const m = { memory_id: 'a', category: 'factual', content: 'the cat sat on the mat' };
    const first = wrappedBlockTokens(m, 22, 'bpe_o200k_base', 'N'.repeat(22));
    expect(wrappedBlockTokens(m, 22, 'bpe_o200k_base', 'N'.repeat(22))).toBe(first);
    expect(blockCacheStats()).toMatchObject({ hits: 1, misses: 1, size: 1 });
    wrappedBlockTokens({ ...m, content: 'the cat sat on the hat' }, 22, 'bpe_o200k_base', 'N'.repeat(22));
    wrappedBlockTokens({ ...m, memory_id: 'b' }, 22, 'bpe_o200k_base', 'N'.repeat(22));
    expect(blockCacheStats()).toMatchObject({ hits: 1, misses: 3, size: 2, capacity: 2 });
  });

  it('charges exactly the formatted block plus its joiner, for any nonce', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 120 }), fc.integer({ min: 1, max: 64 }), (content, bytes) => {
        const nonce = generateNonce(bytes);
        const m = { memory_id: 'id-1', category: 'factual', content };
        const kind = 'bpe_o200k_base';
        const two = formatContext({
          directive: null,
          recentMessages: [],
          memories: [m, m],
          toolSchemas: [],
          nonce,
        });
        const one = formatContext({
          directive: null,
          recentMessages: [],
          memories: [m],
          toolSchemas: [],
          nonce,
        });
        const block = wrappedBlockTokens(m, nonce.length, kind, nonce);
        // The joiner of the first block is in `two`; the last block's joiner is charged but not written.
        expect(estimateTokens(two.assembled_context, kind)).toBeLessThanOrEqual(2 * block);
        expect(
          estimateTokens(two.assembled_context, kind) - estimateTokens(one.assembled_context, kind),
        ).toBe(block);
        // Without the nonce the head is bounded, never under-charged.
        expect(wrappedBlockTokens(m, nonce.length, kind)).toBeGreaterThanOrEqual(block);
      }),
      { numRuns: 100 },
    );
  });
});

// A text generator that hits tokenizer edges: CJK, emoji sequences, digits, whitespace runs, markup.
const piece = fc.constantFrom(
  '中文',
  '日本語',
  '👨‍👩‍👧‍👦',
  '😀',
  '1',
  '123',
  ' ',
  '  ',
  '\n',
  '\n\n',
  '\t',
  'hello',
  ' world',
  "'s",
  '<|endoftext|>',
  '<ibex_memory nonce="x">',
  '&',
  '>',
  '"',
  '.',
);
const textArb = fc.array(piece, { maxLength: 40 }).map((xs) => xs.join(''));

describe('exact counts: the budget invariant (contract.md §6)', () => {
  const exact = CapabilityCatalog.create([], { exactTokens: true });

  it('gpt-3.5-turbo with "1\\n" × 20,000 of history: the fixed parts do not fit, so no memories', () => {
    const estimate = calculateBudget({
      model: CapabilityCatalog.create().resolve('gpt-3.5-turbo'),
      directive: null,
      recentMessages: ONES_HISTORY,
      toolSchemas: [],
      nonceBytes: 16,
    });
    expect(estimate).toMatchObject({ messages_tokens: 10_002, usable_budget: 3598 });
    const b = calculateBudget({
      model: exact.resolve('gpt-3.5-turbo'),
      directive: null,
      recentMessages: ONES_HISTORY,
      toolSchemas: [],
      nonceBytes: 16,
    });
    expect(b).toMatchObject({ messages_tokens: 40_003, usable_budget: 0, estimate_kind: 'bpe_cl100k_base' });
    const r = pack({
      ids: ['m'],
      scores: Float64Array.of(0.9),
      tokens: Int32Array.of(5),
      budget: b.usable_budget,
      dpCellCeiling: 437_570,
      maxConsecutiveSkips: 5,
    });
    expect(r.selected.length).toBe(0);
  });

  it('holds for CJK and family-emoji memories under gpt-4o and gpt-3.5-turbo with exact counts', () => {
    for (const model of ['gpt-4o', 'gpt-3.5-turbo']) {
      const resolved = exact.resolve(model);
      const kind = resolved.policy.estimate_kind;
      const nonce = generateNonce(16);
      const input = {
        model: resolved,
        directive: 'Be brief.',
        recentMessages: [{ role: 'user', content: 'hi' }],
        toolSchemas: [],
        nonceBytes: 16,
        availableTokens: 6000,
      };
      const b = calculateBudget(input);
      const memories = [
        { memory_id: 'cjk', category: 'factual', content: CJK_2000 },
        { memory_id: 'emoji', category: 'episodic', content: FAMILY_500 },
        { memory_id: 'short', category: 'factual', content: 'likes tea' },
      ];
      const costs = memories.map((m) => wrappedBlockTokens(m, nonce.length, kind, nonce));
      const r = pack({
        ids: memories.map((m) => m.memory_id),
        scores: Float64Array.of(0.9, 0.8, 0.1),
        tokens: Int32Array.from(costs),
        budget: b.usable_budget,
        dpCellCeiling: 437_570,
        maxConsecutiveSkips: 5,
      });
      const out = formatContext({
        directive: input.directive,
        recentMessages: input.recentMessages,
        memories: Array.from(r.selected, (i) => memories[i]!),
        toolSchemas: [],
        nonce,
      });
      // chars_div_4 would charge the CJK block ~520 tokens; exactly it is far more, so what fits changes.
      expect(costs[0]).toBeGreaterThan(1000);
      expect(estimateTokens(out.assembled_context, kind)).toBeLessThanOrEqual(
        b.directive_tokens + b.messages_tokens + b.formatter_overhead_tokens + b.usable_budget,
      );
      expect(r.total_tokens).toBeLessThanOrEqual(b.usable_budget);
    }
  });

  it('estimate(assembled) ≤ window − reserve − safety whenever the fixed parts fit (property)', () => {
    const models = ['gpt-4o', 'gpt-3.5-turbo'];
    fc.assert(
      fc.property(
        fc.constantFrom(...models),
        fc.option(textArb, { nil: null }),
        fc.array(fc.record({ role: fc.constantFrom('user', 'assistant', ' user '), content: textArb }), {
          maxLength: 4,
        }),
        fc.array(
          fc.record({
            memory_id: textArb,
            category: fc.constantFrom('factual', 'x<y', ''),
            content: textArb,
          }),
          {
            maxLength: 10,
          },
        ),
        fc.integer({ min: 1, max: 400 }),
        (model, directive, recentMessages, memories, available) => {
          const resolved = exact.resolve(model);
          const kind = resolved.policy.estimate_kind as EstimateKind;
          const nonce = generateNonce(16);
          // available_tokens shrinks the usable budget so that packing has to choose.
          const b = calculateBudget({
            model: resolved,
            directive,
            recentMessages,
            toolSchemas: [],
            nonceBytes: 16,
            availableTokens: available,
          });
          if (b.usable_budget <= 0) return;
          const ids = memories.map((_, i) => `k${i}`);
          const costs = memories.map((m) => wrappedBlockTokens(m, nonce.length, kind, nonce));
          const r = pack({
            ids,
            scores: Float64Array.from(memories, (_, i) => 1 / (i + 1)),
            tokens: Int32Array.from(costs),
            budget: b.usable_budget,
            dpCellCeiling: 437_570,
            maxConsecutiveSkips: 5,
          });
          const out = formatContext({
            directive,
            recentMessages,
            memories: Array.from(r.selected, (i) => memories[i]!),
            toolSchemas: [],
            nonce,
          });
          const used = estimateTokens(out.assembled_context, kind);
          // The fixed parts plus what the memories were allowed: with available_tokens this is tighter
          // than window − reserve − safety, which it never exceeds.
          const allowed =
            b.directive_tokens + b.messages_tokens + b.formatter_overhead_tokens + b.usable_budget;
          expect(allowed).toBeLessThanOrEqual(b.context_window - b.response_reserve - b.safety_buffer);
          expect(used).toBeLessThanOrEqual(allowed);
        },
      ),
      { numRuns: Number(process.env.BPE_PROPERTY_RUNS ?? 300) },
    );
  });
});
