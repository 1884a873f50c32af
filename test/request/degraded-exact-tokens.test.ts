/**
 * The degraded answer under exact token counts (IBEX_CONTEXT_EXACT_TOKENS, contract.md §1 isolation rule, §10):
 * it is built on the main thread, so it never runs the BPE tokenizer on history or directive text — a
 * max-size history of 32 KB words is answered L2 with bounded counts that never undercount.
 */
import { Metadata } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { historyText } from '../../src/budget/budget-calculator.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { loadSettings } from '../../src/config/settings.js';
import type { CpuPool } from '../../src/pool/pool-client.js';
import { createAssembler } from '../../src/request/assemble.js';
import type { CallContext } from '../../src/request/call-context.js';
import { validateAssembleRequest } from '../../src/request/validate.js';
import type { RetrievalSources } from '../../src/retrieval/retrieve.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { bpeCount, MAX_EXACT_CHUNK, warmBpe } from '../../src/text/bpe.js';
import { bpeTokenBound, historyTokenBound } from '../../src/text/bpe-bound.js';
import { monotonicNow } from '../../src/util/clock.js';
import { Errors } from '../../src/wire/errors.js';
import { ASSEMBLED_UTF8 } from '../../src/wire/proto.js';
import { splicedText } from '../../src/wire/spliced.js';

/** Every text the BPE tokenizer counts in this file's process, by length. */
const counted = vi.hoisted(() => ({ lengths: [] as number[] }));
vi.mock('../../src/text/bpe.js', async (importOriginal) => {
  const orig = await importOriginal<typeof import('../../src/text/bpe.js')>();
  return {
    ...orig,
    bpeCount: (text: string, kind: Parameters<typeof orig.bpeCount>[1]) => {
      counted.lengths.push(text.length);
      return orig.bpeCount(text, kind);
    },
  };
});

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const DIRECTIVE = 'Answer briefly. '.repeat(50);

beforeAll(() => warmBpe(), 60_000);

/** Memory items of the test's org and agent, as a source returns them (`vector`: relevance = similarity). */
function memoryItems(contents: string[]) {
  return contents.map((content, i) => ({
    memory: {
      id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      org_id: ORG,
      agent_id: AGENT,
      content,
      category: 'factual',
      confidence: 0.9,
    },
    similarity: 0.9 - i / 100,
    rank: i + 1,
    source: 'vector',
  }));
}

function exactAssembler(memories: ReturnType<typeof memoryItems> = []) {
  const settings = loadSettings({ IBEX_CONTEXT_LOG_LEVEL: 'silent', IBEX_CONTEXT_EXACT_TOKENS: 'true' });
  const catalog = CapabilityCatalog.load(settings.catalogFile, { exactTokens: true });
  const sources = {
    directive: {
      get: async () => ({ content: DIRECTIVE, injection_mode: 'system_first', version_id: 'v1' }),
      close: async () => {},
    },
    memory: { hot: async () => [], search: async () => memories, close: async () => {} },
    close: async () => {},
    kind: { memory: 'embedded', directive: 'embedded' },
  } as unknown as RetrievalSources;
  // The CPU stage is never had in time: every answer is the main thread's degraded one.
  const pool = {
    run: async () => {
      throw Errors.poolDeadline('withdrawn', new Error('no thread in time'));
    },
  } as unknown as CpuPool;
  return createAssembler({
    settings,
    catalog,
    sources,
    pool,
    logger: createLogger({ logLevel: 'silent' }),
  });
}

function ctx(leftMs: number): CallContext {
  const now = monotonicNow();
  return {
    signal: new AbortController().signal,
    deadline: now + leftMs,
    arrival: now,
    metadata: new Metadata(),
  };
}

describe('degraded answer under exact token counts', () => {
  afterEach(() => {
    counted.lengths = [];
  });

  it('answers a max-size history of 32 KB words L2 without BPE-counting history or directive', async () => {
    const assemble = exactAssembler();
    const word = 'a'.repeat(32_768);
    const messages = Array.from({ length: 100 }, () => ({ role: 'user', content: word }));
    const req = validateAssembleRequest({
      org_id: ORG,
      agent_id: AGENT,
      model: 'gpt-4o',
      query: 'q',
      recent_messages: messages,
    });
    counted.lengths = [];
    const { response, level } = await assemble(req, ctx(10_000));
    expect(level).toBe('L2');
    expect(response.degradation.reasons).toContain('pool_deadline');
    // Nothing longer than the formatter's fixed strings went through the tokenizer.
    expect(Math.max(0, ...counted.lengths)).toBeLessThan(200);
    // The history's bytes: 100 × ("user" + ": " + 32,768) + 99 newlines; charged as a bound.
    const historyBytes = 100 * (4 + 2 + 32_768) + 99;
    expect(response.history_tokens).toBe(bpeTokenBound(historyBytes));
    expect(response.directive_tokens).toBe(bpeTokenBound(DIRECTIVE.length));
    const assembled = response[ASSEMBLED_UTF8]!;
    expect(assembled.byteLength).toBeGreaterThan(historyBytes);
    expect(response.tokens_used).toBe(bpeTokenBound(assembled.byteLength));
  });
});

describe('degraded answer with memories under exact token counts', () => {
  afterEach(() => {
    counted.lengths = [];
  });

  it('keeps memories L1 on byte bounds: no memory text reaches the tokenizer, tokens_used within budget', async () => {
    // Ten 1 KB memories of long words, then one of 64 KB (past the main thread's memory text bound).
    const contents = [
      ...Array.from({ length: 10 }, (_, i) => `${'w'.repeat(1000)} <${i}> & more`),
      'z'.repeat(65_536),
    ];
    const assemble = exactAssembler(memoryItems(contents));
    const req = validateAssembleRequest({
      org_id: ORG,
      agent_id: AGENT,
      model: 'gpt-4o',
      query: 'q',
      available_tokens: 5000,
      recent_messages: [{ role: 'user', content: 'hello' }],
    });
    counted.lengths = [];
    const { response, level } = await assemble(req, ctx(10_000));
    expect(level).toBe('L1');
    expect(response.degradation.reasons).toEqual(['pool_deadline']);
    // Each 1 KB block is bounded at ≥ 1,100 tokens: four fit 5,000 tokens less the answer's own bound.
    expect(response.memories_included).toBeGreaterThanOrEqual(1);
    expect(response.memories_included).toBeLessThan(5);
    expect(Math.max(0, ...counted.lengths)).toBeLessThan(200);
    const assembled = response[ASSEMBLED_UTF8]!;
    expect(response.tokens_used).toBe(bpeTokenBound(assembled.byteLength));
    expect(response.memory_tokens).toBeLessThanOrEqual(5000);
    const text = splicedText(assembled);
    expect(text).toContain('&lt;0&gt; &amp; more');
    expect(text).not.toContain('zzzz');
    // The exact count of the answer never exceeds the bound charged for it.
    expect(bpeCount(text, 'bpe_o200k_base')).toBeLessThanOrEqual(response.tokens_used);
  });
});

describe('bpeTokenBound', () => {
  it('never undercounts the exact count of a text, nor historyTokenBound that of a history', () => {
    const text = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 600 }),
      fc.string({ unit: 'grapheme', maxLength: 300 }),
      // Long runs of one class take the chunked path (counted in pieces, one token per cut).
      fc
        .tuple(
          fc.constantFrom('a', '中', '😀', ' ', '!', '\n'),
          fc.integer({ min: 1, max: 3 * MAX_EXACT_CHUNK }),
        )
        .map(([c, n]) => c.repeat(n)),
    );
    fc.assert(
      fc.property(text, fc.constantFrom('bpe_o200k_base' as const, 'bpe_cl100k_base' as const), (t, kind) => {
        expect(bpeCount(t, kind)).toBeLessThanOrEqual(bpeTokenBound(Buffer.byteLength(t, 'utf8')));
      }),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(
        fc.array(fc.record({ role: fc.constantFrom('user', 'assistant', ' tool '), content: text }), {
          maxLength: 6,
        }),
        (messages) => {
          const spans = new Uint32Array(4 * messages.length);
          let at = 0;
          messages.forEach((m, i) => {
            const role = Buffer.byteLength(m.role);
            const content = Buffer.byteLength(m.content);
            spans.set([at, at + role, at + role, at + role + content], 4 * i);
            at += role + content;
          });
          const bound = historyTokenBound(
            { spans, count: messages.length },
            { roles: messages.map((m) => m.role), contentValid: new Uint8Array(messages.length).fill(1) },
          );
          // Lone surrogates encode as U+FFFD (3 bytes), as they would on the wire.
          expect(
            bpeCount(Buffer.from(historyText(messages)).toString(), 'bpe_o200k_base'),
          ).toBeLessThanOrEqual(bound);
        },
      ),
      { numRuns: 150 },
    );
  });
});
