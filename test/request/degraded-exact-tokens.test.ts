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
import { memoryHit } from '../helpers/memory-hit.js';

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

/** Bytes of text the history code counts (code points) or decodes on this thread, by call. */
const walked = vi.hoisted(() => ({ counted: [] as number[], decoded: [] as number[] }));
vi.mock('../../src/text/utf8.js', async (importOriginal) => {
  const orig = await importOriginal<typeof import('../../src/text/utf8.js')>();
  return {
    ...orig,
    utf8CodePointCount: (...args: Parameters<typeof orig.utf8CodePointCount>) => {
      walked.counted.push(args[2] - args[1]);
      return orig.utf8CodePointCount(...args);
    },
    utf8Text: (bytes: Uint8Array, start: number, end: number) => {
      walked.decoded.push(end - start);
      return orig.utf8Text(bytes, start, end);
    },
  };
});

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const DIRECTIVE = 'Answer briefly. '.repeat(50);

beforeAll(() => warmBpe(), 60_000);

/** Memory items of the test's org and agent, as a source returns them (`vector`: relevance = similarity). */
function memoryItems(contents: string[]) {
  return contents.map((content, i) =>
    memoryHit(content, i, {
      org: ORG,
      agent: AGENT,
      confidence: 0.9,
      similarity: 0.9 - i / 100,
      rank: i + 1,
      source: 'vector',
    }),
  );
}

function exactAssembler(memories: ReturnType<typeof memoryItems> = [], exactTokens = true) {
  const settings = loadSettings({
    IBEX_CONTEXT_LOG_LEVEL: 'silent',
    IBEX_CONTEXT_EXACT_TOKENS: String(exactTokens),
  });
  const catalog = CapabilityCatalog.load(settings.catalogFile, { exactTokens });
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

/** A gpt-4o request of the test's org and agent with `messages` as its history. */
function requestWith(messages: { role: string; content: string }[], availableTokens = 0) {
  return validateAssembleRequest({
    org_id: ORG,
    agent_id: AGENT,
    model: 'gpt-4o',
    query: 'q',
    available_tokens: availableTokens,
    recent_messages: messages,
  });
}

function ctx(leftMs: number): CallContext {
  const now = monotonicNow();
  return {
    signal: new AbortController().signal,
    deadline: now + leftMs,
    arrival: now,
    metadata: new Metadata(),
    gathered: {},
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

/** Fixed parts plus `usable_budget`: what the degraded answer's `tokens_used` may reach (answers.ts). */
function fixedParts(r: { directive_tokens: number; history_tokens: number }) {
  return r.directive_tokens + r.history_tokens;
}

describe('degraded answer history cost from byte spans (O(messages) on the main thread)', () => {
  afterEach(() => {
    counted.lengths = [];
    walked.counted = [];
    walked.decoded = [];
  });

  it('under exact tokens, a max-size history is neither tokenized, counted nor decoded on this thread', async () => {
    const assemble = exactAssembler();
    const word = 'a'.repeat(32_768);
    const messages = Array.from({ length: 100 }, () => ({ role: 'assistant', content: word }));
    const req = requestWith(messages);
    counted.lengths = [];
    walked.counted = [];
    walked.decoded = [];
    const { response, level } = await assemble(req, ctx(10_000));
    expect(level).toBe('L2');
    expect(Math.max(0, ...counted.lengths)).toBeLessThan(200);
    // No code-point count of any history content, and only roles (≤ 256 bytes) decoded.
    expect(walked.counted).toEqual([]);
    expect(Math.max(0, ...walked.decoded)).toBeLessThanOrEqual(256);
    const assembled = response[ASSEMBLED_UTF8]!;
    expect(response.tokens_used).toBe(bpeTokenBound(assembled.byteLength));
    expect(bpeCount(splicedText(assembled), 'bpe_o200k_base')).toBeLessThanOrEqual(response.tokens_used);
  });

  it('under an estimate, charges byte lengths for a multi-byte history: never below the exact estimate, within budget with memories', async () => {
    const assemble = exactAssembler(
      memoryItems(Array.from({ length: 6 }, (_, i) => `fact ${i} ${'m'.repeat(400)}`)),
      false,
    );
    // 10,922 CJK code points: 32,766 bytes, under the wire's pending threshold; three bytes per code point.
    const cjk = '漢'.repeat(10_922);
    const messages = Array.from({ length: 10 }, (_, i) => ({ role: 'user', content: i === 0 ? 'hi' : cjk }));
    const req = requestWith(messages, 100_000);
    walked.counted = [];
    walked.decoded = [];
    const { response, level } = await assemble(req, ctx(10_000));
    expect(level).toBe('L1');
    expect(walked.counted).toEqual([]);
    expect(Math.max(0, ...walked.decoded)).toBeLessThanOrEqual(256);
    // The CPU stage's exact estimate of the history (chars_div_4 on code points) is the floor of the charge.
    const exact = Math.ceil(historyText(messages).length / 4);
    expect(response.history_tokens).toBeGreaterThanOrEqual(exact);
    expect(response.history_tokens).toBe(Math.ceil(Buffer.byteLength(historyText(messages)) / 4));
    expect(response.memories_included).toBeGreaterThan(0);
    // The answer's real estimate never exceeds what it reports, nor that the caller's budget.
    const text = splicedText(response[ASSEMBLED_UTF8]!);
    expect(Math.ceil([...text].length / 4)).toBeLessThanOrEqual(response.tokens_used);
    expect(response.tokens_used).toBeLessThanOrEqual(100_000);
    expect(response.memory_tokens).toBeLessThanOrEqual(100_000 - fixedParts(response));
  });

  it('counts only the contents whose length the wire left pending (32,768 < bytes ≤ 131,072)', async () => {
    const assemble = exactAssembler([], false);
    const pending = '漢'.repeat(20_000); // 60,000 bytes: pending on the wire, within once counted
    const messages = [
      { role: 'user', content: 'a'.repeat(30_000) },
      { role: 'user', content: pending },
    ];
    const req = requestWith(messages);
    walked.counted = [];
    const { response } = await assemble(req, ctx(10_000));
    expect(walked.counted).toEqual([Buffer.byteLength(pending)]);
    // The counted content is charged its code points, the other its bytes (equal here: ASCII).
    expect(response.history_tokens).toBe(Math.ceil(historyText(messages).length / 4));
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
