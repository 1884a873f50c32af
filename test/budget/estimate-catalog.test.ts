import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { calculateBudget, responseReserve, wrappedBlockTokens } from '../../src/budget/budget-calculator.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { formatContext } from '../../src/format/formatter.js';
import { addCounts, codePointLength, countTokens, estimateTokens } from '../../src/text/estimate.js';
import { isIbexError } from '../../src/wire/errors.js';

describe('token estimation (contract.md §5)', () => {
  it('counts code points, not UTF-16 units', () => {
    expect(codePointLength('😀😀')).toBe(2);
    expect(codePointLength('\ud800x')).toBe(2); // lone surrogate counts once
    expect(estimateTokens('😀😀😀😀😀', 'chars_div_4')).toBe(2);
    expect(estimateTokens('😀😀😀😀😀', 'runes_div_3_5')).toBe(2); // floor((10+6)/7)
    expect(estimateTokens('', 'runes_div_3_5')).toBe(0);
    expect(estimateTokens('a', 'runes_div_3_5')).toBe(1);
  });

  it('estimates CJK and emoji text by code points (property)', () => {
    const cjkOrEmoji = fc.constantFrom('中', '文', '日', '本', '語', '한', '😀', '👩', '𝔘');
    fc.assert(
      fc.property(fc.array(cjkOrEmoji, { maxLength: 300 }), (chars) => {
        const text = chars.join('');
        const L = chars.length;
        expect(estimateTokens(text, 'chars_div_4')).toBe(L === 0 ? 0 : Math.ceil(L / 4));
        expect(estimateTokens(text, 'runes_div_3_5')).toBe(L === 0 ? 0 : Math.floor((2 * L + 6) / 7));
      }),
    );
  });

  it('refuses to combine counts of two estimate kinds', () => {
    const a = countTokens('hello', 'chars_div_4');
    expect(addCounts(a, countTokens('world!', 'chars_div_4')).tokens).toBe(4);
    let caught: unknown;
    try {
      addCounts(a, countTokens('hello', 'runes_div_3_5'));
    } catch (err) {
      caught = err;
    }
    expect(isIbexError(caught, 'IBEX_ERR_ESTIMATE_KIND_MISMATCH')).toBe(true);
  });
});

describe('capability catalog (contract.md §5)', () => {
  const catalog = CapabilityCatalog.load();

  it('resolves built-in models trimmed and case-sensitive', () => {
    expect(catalog.resolve(' gpt-4o ').model.context_window).toBe(128_000);
    expect(catalog.resolve('claude-opus-4-5').policy).toEqual({
      tokenizer_family: 'claude',
      estimate_kind: 'runes_div_3_5',
      safety_buffer_fraction: 0.05,
    });
    expect(() => catalog.resolve('GPT-4o')).toThrow("unknown model 'GPT-4o'");
  });

  it('loads an override file that adds and replaces models', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ibex-catalog-'));
    const file = path.join(dir, 'catalog.json');
    writeFileSync(
      file,
      JSON.stringify({
        schema_version: 1,
        models: [
          {
            model_id: 'tiny-1',
            provider: 'x',
            context_window: 4096,
            max_output_tokens: 512,
            supports_tools: false,
            supports_vision: false,
            supports_streaming: true,
            tokenizer_family: 'unknown',
          },
          {
            model_id: 'gpt-4o',
            provider: 'openai',
            context_window: 64000,
            max_output_tokens: 8000,
            supports_tools: true,
            supports_vision: true,
            supports_streaming: true,
            tokenizer_family: 'o200k_base',
          },
        ],
      }),
    );
    const c = CapabilityCatalog.load(file);
    expect(c.resolve('tiny-1').policy.safety_buffer_fraction).toBe(0.1);
    expect(c.resolve('gpt-4o').model.context_window).toBe(64_000);
    expect(c.resolve('gpt-4o-mini').model.context_window).toBe(128_000);
  });

  it('rejects an override with a bad schema, naming the field', () => {
    expect(() => CapabilityCatalog.create([{ schema_version: 1, models: [{ model_id: 'x' }] }])).toThrow(
      /capability catalog: models\.0\./,
    );
  });
});

describe('BudgetCalculator (contract.md §6)', () => {
  const catalog = CapabilityCatalog.load();

  it('computes the response reserve bounds', () => {
    expect(responseReserve(200_000, 64_000)).toBe(4096);
    expect(responseReserve(2000, 64_000)).toBe(500);
    expect(responseReserve(16_385, 4096)).toBe(2457);
  });

  it('caps usable_budget by available_tokens and recomputes is_constrained', () => {
    const base = {
      model: catalog.resolve('gpt-4o'),
      directive: null,
      recentMessages: [],
      toolSchemas: [],
      nonceBytes: 16,
    };
    const full = calculateBudget(base);
    expect(full.usable_budget).toBe(128_000 - 4096 - 2560);
    expect(calculateBudget({ ...base, availableTokens: 200 })).toMatchObject({
      usable_budget: 200,
      is_constrained: true,
    });
    expect(calculateBudget({ ...base, availableTokens: 10_000_000 }).usable_budget).toBe(full.usable_budget);
  });

  it('charges every memory block so the formatted prompt never exceeds its estimate (property)', () => {
    const text = fc.string({ unit: 'binary', maxLength: 200 });
    fc.assert(
      fc.property(
        fc.array(fc.record({ memory_id: text, category: text, content: text }), { maxLength: 8 }),
        fc.constantFrom('chars_div_4', 'runes_div_3_5'),
        fc.integer({ min: 1, max: 64 }),
        (memories, kind, bytes) => {
          const nonce = 'N'.repeat(Math.floor((4 * bytes + 2) / 3));
          const charged = memories.reduce((sum, m) => sum + wrappedBlockTokens(m, nonce.length, kind), 0);
          const section = formatContext({
            directive: null,
            recentMessages: [],
            memories,
            toolSchemas: [],
            nonce,
          });
          expect(estimateTokens(section.assembled_context, kind)).toBeLessThanOrEqual(charged);
        },
      ),
    );
  });
});
