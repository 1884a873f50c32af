/**
 * The stepped degraded answer (contract.md §10): when the CPU stage is lost for time or saturation the
 * main thread keeps the candidates that fit, greedily in rank order, from at most
 * DEGRADED_MEMORY_TEXT_BYTES of memory text. For random candidates, histories and budgets under every
 * estimate kind: `tokens_used` stays within the fixed parts plus the usable budget (and under the
 * context window's share), the rows say what happened to each candidate, and the memory text read stays
 * under the bound.
 */
import { Metadata } from '@grpc/grpc-js';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { calculateBudget, type TokenBudget } from '../../src/budget/budget-calculator.js';
import { CapabilityCatalog, type ResolvedModel } from '../../src/budget/catalog.js';
import { loadSettings } from '../../src/config/settings.js';
import { measuredHistory } from '../../src/format/assembly-text.js';
import { boundHistory } from '../../src/format/history-utf8.js';
import { degradedAnswer, degradedTokenLimit } from '../../src/request/answers.js';
import {
  DEGRADED_MEMORY_TEXT_BYTES,
  type DegradedCandidate,
  selectDegradedMemories,
} from '../../src/request/degraded-memories.js';
import type { Assembly } from '../../src/request/response-parts.js';
import { StageReserve } from '../../src/request/stage-reserve.js';
import { validateAssembleRequest } from '../../src/request/validate.js';
import { bpeCount, warmBpe } from '../../src/text/bpe.js';
import { bpeTokenBound, historyTokenBound } from '../../src/text/bpe-bound.js';
import { escapeBody } from '../../src/text/escape.js';
import { type EstimateKind, estimateFromLength, estimateTokens } from '../../src/text/estimate.js';
import { monotonicNow } from '../../src/util/clock.js';
import {
  ASSEMBLED_UTF8,
  contextServiceDefinition,
  MEMORY_ROWS,
  type MemoryUsed,
} from '../../src/wire/proto.js';
import { splicedText } from '../../src/wire/spliced.js';
import type { ScoredCandidate } from '../../src/wire/types.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const NONCE = 'AbCdEfGhIjKlMnOpQrStUv';

const settings = loadSettings({ IBEX_CONTEXT_LOG_LEVEL: 'silent' });
const estimateModel = CapabilityCatalog.load(settings.catalogFile).resolve('gpt-4o');
const bpeModel = CapabilityCatalog.load(settings.catalogFile, { exactTokens: true }).resolve('gpt-4o');

beforeAll(() => warmBpe(), 60_000);

/** A model whose estimate kind is `kind` (the catalog's gpt-4o otherwise). */
function modelOf(kind: EstimateKind): ResolvedModel {
  if (kind === bpeModel.policy.estimate_kind) return bpeModel;
  return { ...estimateModel, policy: { ...estimateModel.policy, estimate_kind: kind } };
}

/** Memory text that exercises escaping, astral and CJK code points, lone surrogates. */
const memoryText = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 200 }),
  fc.string({ unit: 'binary', maxLength: 200 }),
  fc
    .array(fc.constantFrom('a', ' ', '<', '>', '&', '"', '😀', '漢', '\uD800', 'é'), { maxLength: 300 })
    .map((a) => a.join('')),
  // Large ones: several of them exceed the main thread's memory text bound.
  fc
    .tuple(fc.constantFrom('x', '<b>', '漢字'), fc.integer({ min: 100, max: 12_000 }))
    .map(([s, n]) => s.repeat(n)),
);

/** A content as text, as well-formed UTF-8 bytes, or as malformed bytes (decoded with U+FFFD). */
const content = fc.oneof(
  memoryText,
  memoryText.map((t) => new Uint8Array(Buffer.from(t, 'utf8'))),
  fc.uint8Array({ maxLength: 400 }),
);

const candidate = fc.record({
  id: fc.uuid(),
  category: fc.constantFrom('procedural', 'factual', 'preference', 'episodic', 'notes', 'a"<b>'),
  content,
  score: fc.double({ min: 0, max: 1, noNaN: true }),
});

function scored(
  cands: { id: string; category: string; content: string | Uint8Array; score: number }[],
): ScoredCandidate[] {
  return cands.map((c, i) => ({
    memory_id: c.id,
    org_id: ORG,
    agent_id: AGENT,
    content: c.content,
    category: c.category,
    confidence: 0.5,
    similarity: c.score,
    rank: i + 1,
    source: 'hot',
    score: c.score,
  }));
}

/** The degraded answer of `a` under the test's settings; `keepMemories` as {@link degradedAnswer} takes it. */
function answerOf(a: Assembly, resolved: typeof estimateModel, keepMemories: boolean) {
  return degradedAnswer(a, {
    resolved,
    nonceBytes: settings.nonceBytes,
    reserve: new StageReserve(settings.cpuStageReserveMs),
    ...(keepMemories ? { keepMemories } : {}),
  });
}

/** The call as the assembler hands it to the degraded answer. */
function assembly(
  kept: ScoredCandidate[],
  filtered: ScoredCandidate[],
  history: string[],
  directive: string | null,
  availableTokens: number,
): Assembly {
  const req = validateAssembleRequest({
    org_id: ORG,
    agent_id: AGENT,
    model: 'gpt-4o',
    query: 'q',
    available_tokens: availableTokens,
    recent_messages: history.map((content, i) => ({ role: i % 2 ? 'assistant' : 'user', content })),
  });
  const now = monotonicNow();
  return {
    req,
    ctx: {
      signal: new AbortController().signal,
      deadline: now + 1000,
      arrival: now,
      metadata: new Metadata(),
      gathered: {},
    },
    retrieval: {
      directive:
        directive === null ? null : { content: directive, injection_mode: 'system_first', version_id: 'v' },
      hot: [],
      cold: [],
      branches: [],
      dropped: { invalid: 0, foreign: 0 },
      bounded: { oversize: 0, ignored: 0 },
    } as unknown as Assembly['retrieval'],
    kept,
    columns: kept,
    filtered,
    nonce: NONCE,
    rankingMs: 0,
    historyBytes: 0,
  };
}

/** The budget the degraded answer computes for `a` (same inputs: bounds under a BPE kind). */
function budgetOf(a: Assembly, model: ResolvedModel): TokenBudget {
  const h = a.req.history;
  const measure = measuredHistory(h, boundHistory)!.measure!;
  const directive = a.retrieval.directive?.content ?? null;
  const bpe = model.policy.estimate_kind.startsWith('bpe');
  return calculateBudget({
    model,
    directive,
    recentMessages: measure,
    toolSchemas: [],
    nonceBytes: settings.nonceBytes,
    availableTokens: a.req.availableTokens,
    counted: bpe
      ? {
          directive: bpeTokenBound(Buffer.byteLength(directive ?? '', 'utf8')),
          messages: historyTokenBound(h, measure),
        }
      : undefined,
  });
}

function rowsOf(bytes: Uint8Array): MemoryUsed[] {
  const decoded = contextServiceDefinition.AssembleContext!.responseDeserialize(Buffer.from(bytes)) as {
    memories_used: MemoryUsed[];
  };
  return decoded.memories_used;
}

/** What the answer's UTF-8 carries of a candidate's content (malformed bytes, lone surrogates: U+FFFD). */
function textOf(c: DegradedCandidate): string {
  return Buffer.from(c.content as string & Uint8Array).toString('utf8');
}

function blockOf(c: DegradedCandidate): string {
  return `${escapeBody(textOf(c))}\n</ibex_memory>`;
}

const utf8 = (s: string) => Buffer.byteLength(s, 'utf8');
/** What reading a candidate costs: id and category bytes, escaped content bytes (malformed: ≥ its own). */
const readBytes = (c: DegradedCandidate) =>
  utf8(c.memory_id) +
  utf8(c.category) +
  Math.max(typeof c.content === 'string' ? 0 : c.content.byteLength, utf8(escapeBody(textOf(c))));

const KINDS: EstimateKind[] = ['chars_div_4', 'runes_div_3_5', bpeModel.policy.estimate_kind];

describe('degraded answer with memories (degrade in steps)', () => {
  it('keeps tokens_used within budget, rows honest and memory text read within its bound (property)', () => {
    /** Runs that exercised each outcome, per kind: the property must not hold vacuously. */
    const seen = new Map<string, number>();
    const saw = (what: string) => seen.set(what, (seen.get(what) ?? 0) + 1);
    const outcomes = KINDS.flatMap((kind) => ['included', 'budget', 'failed'].map((e) => `${kind} ${e}`));
    const property = fc.property(
      fc.array(candidate, { maxLength: 24 }),
      fc.array(candidate, { maxLength: 3 }),
      fc.array(fc.string({ unit: 'grapheme', maxLength: 300 }), { maxLength: 6 }),
      fc.option(fc.string({ maxLength: 200 }), { nil: null }),
      fc.oneof(fc.integer({ min: 1, max: 4000 }), fc.constant(0)),
      fc.constantFrom(...KINDS),
      (keptIn, filteredIn, history, directive, available, kind) => {
        const model = modelOf(kind);
        const kept = scored(keptIn);
        const filtered = scored(filteredIn);
        const a = assembly(kept, filtered, history, directive, available);
        const budget = budgetOf(a, model);
        const response = answerOf(a, model, true);
        const text = splicedText(response[ASSEMBLED_UTF8]!);
        const bpe = kind.startsWith('bpe');
        // tokens_used is a bound of the text's bytes under BPE; under an estimate, between the estimate of
        // the text and that of its bytes (history contents are charged their byte lengths) ...
        if (bpe) expect(response.tokens_used).toBe(bpeTokenBound(utf8(text)));
        else {
          expect(response.tokens_used).toBeGreaterThanOrEqual(estimateTokens(text, kind));
          expect(response.tokens_used).toBeLessThanOrEqual(estimateFromLength(utf8(text), kind));
        }
        const rows = rowsOf(response[MEMORY_ROWS]!);
        const included = rows.filter((r) => r.exclusion === 'included');
        for (const r of rows) saw(`${kind} ${r.exclusion}`);
        expect(rows).toHaveLength(kept.length + filtered.length);
        expect(included).toHaveLength(response.memories_included);
        if (included.length > 0) {
          // ... within the fixed parts plus the usable budget, and the contract.md §6 invariant.
          expect(response.tokens_used).toBeLessThanOrEqual(degradedTokenLimit(budget));
          expect(response.tokens_used).toBeLessThanOrEqual(
            budget.context_window - budget.response_reserve - budget.safety_buffer,
          );
          if (bpe) expect(bpeCount(text, kind as 'bpe_o200k_base')).toBeLessThanOrEqual(response.tokens_used);
        }
        const memoryTokens = included.reduce((s, r) => s + r.token_estimate, 0);
        expect(response.memory_tokens).toBe(memoryTokens);
        expect(memoryTokens).toBeLessThanOrEqual(budget.usable_budget);
        // Rows: included (rank order), budget, failed (not read), then filter; costs only where read.
        const order = ['included', 'budget', 'failed', 'filter'];
        const kinds = rows.map((r) => order.indexOf(r.exclusion));
        expect(kinds).toEqual([...kinds].sort((x, y) => x - y));
        expect(rows.slice(kept.length).every((r) => r.exclusion === 'filter')).toBe(true);
        const byId = new Map(kept.map((c, i) => [c.memory_id, i]));
        const includedAt = included.map((r) => byId.get(r.memory_id)!);
        expect(includedAt).toEqual([...includedAt].sort((x, y) => x - y));
        for (const r of rows) {
          if (r.exclusion === 'included' || r.exclusion === 'budget')
            expect(r.token_estimate).toBeGreaterThan(0);
          else expect(r.token_estimate).toBe(0);
        }
        // Greedy: a costed candidate left out did not fit what its predecessors left (estimate kinds;
        // under BPE the whole answer's bound can be what stopped it).
        if (!bpe) {
          for (const r of rows.filter((x) => x.exclusion === 'budget')) {
            const at = byId.get(r.memory_id)!;
            const before = included
              .filter((x) => byId.get(x.memory_id)! < at)
              .reduce((s, x) => s + x.token_estimate, 0);
            expect(before + r.token_estimate).toBeGreaterThan(budget.usable_budget);
          }
        }
        // Every kept memory is in the context, escaped, once per block.
        for (const r of included) {
          const c = kept[byId.get(r.memory_id)!]!;
          expect(text).toContain(blockOf(c));
        }
        expect(text.split('</ibex_memory>').length - 1).toBe(included.length);
        // Memory text read on the main thread: the costed candidates' text, within the bound.
        const read = rows
          .filter((r) => r.exclusion === 'included' || r.exclusion === 'budget')
          .reduce((s, r) => s + readBytes(kept[byId.get(r.memory_id)!]!), 0);
        expect(read).toBeLessThanOrEqual(DEGRADED_MEMORY_TEXT_BYTES);
      },
    );
    // Random batches until every outcome has been exercised (one batch of 300 misses one now and then).
    for (let batch = 0; batch < 10 && outcomes.some((o) => !seen.has(o)); batch++)
      fc.assert(property, { numRuns: 300 });
    for (const kind of KINDS) {
      for (const exclusion of ['included', 'budget', 'failed'])
        expect(seen.get(`${kind} ${exclusion}`) ?? 0, `${kind} ${exclusion}`).toBeGreaterThan(0);
    }
  });

  it('without keepMemories (shed, failed stage) the answer has no memory and every kept row is failed', () => {
    const kept = scored([
      { id: '11111111-1111-4111-8111-111111111111', category: 'factual', content: 'x <y>', score: 1 },
    ]);
    const a = assembly(kept, [], ['hi'], 'Be brief.', 0);
    const response = answerOf(a, estimateModel, false);
    expect(response.memories_included).toBe(0);
    expect(splicedText(response[ASSEMBLED_UTF8]!)).not.toContain('</ibex_memory>');
    expect(rowsOf(response[MEMORY_ROWS]!).map((r) => [r.exclusion, r.token_estimate])).toEqual([
      ['failed', 0],
    ]);
  });

  it('skips a candidate too large to read without reading it and keeps smaller ones after it', () => {
    const huge = 'z'.repeat(4 * DEGRADED_MEMORY_TEXT_BYTES);
    const kept = scored([
      { id: '11111111-1111-4111-8111-111111111111', category: 'factual', content: huge, score: 1 },
      {
        id: '22222222-2222-4222-8222-222222222222',
        category: 'factual',
        content: Buffer.from('a & <b>'),
        score: 0.9,
      },
      {
        id: '33333333-3333-4333-8333-333333333333',
        category: 'episodic',
        content: 'tea > coffee',
        score: 0.8,
      },
    ]);
    const a = assembly(kept, [], ['hi'], 'Be brief.', 0);
    const response = answerOf(a, estimateModel, true);
    const rows = rowsOf(response[MEMORY_ROWS]!);
    expect(rows.map((r) => [r.memory_id.slice(0, 1), r.exclusion])).toEqual([
      ['2', 'included'],
      ['3', 'included'],
      ['1', 'failed'],
    ]);
    const text = splicedText(response[ASSEMBLED_UTF8]!);
    expect(text).toContain('a &amp; &lt;b&gt;');
    expect(text).toContain('tea &gt; coffee');
    expect(text).not.toContain('zzz');
  });

  it('selectDegradedMemories never reads more than its bound, whatever the candidates (property)', () => {
    fc.assert(
      fc.property(
        fc.array(candidate, { maxLength: 30 }),
        fc.integer({ min: 0, max: 20_000 }),
        fc.integer({ min: 0, max: 6000 }),
        fc.constantFrom(...KINDS),
        (cands, textBytes, usable, kind) => {
          const kept = scored(cands);
          const s = selectDegradedMemories(kept, {
            kind,
            nonceChars: NONCE.length,
            usable,
            bound: { baseBytes: 100, limit: 100 + usable },
            textBytes,
          });
          expect(s.textBytes).toBeLessThanOrEqual(textBytes);
          const costed = [...s.included, ...s.excluded].reduce((sum, i) => sum + readBytes(kept[i]!), 0);
          expect(costed).toBeLessThanOrEqual(textBytes);
          expect(s.memoryTokens).toBe(s.included.reduce((sum, i) => sum + s.costs[i]!, 0));
          expect(s.memoryTokens).toBeLessThanOrEqual(usable);
          expect(s.memories).toHaveLength(s.included.length);
        },
      ),
      { numRuns: 200 },
    );
  });
});
