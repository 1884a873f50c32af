/**
 * The CPU stage's filters: history repeats, lexical relevance of unmeasured candidates, max_memories,
 * and memory dates; pure functions first, then through runCpuTask and its MemoryUsed rows.
 */
import { describe, expect, it } from 'vitest';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import {
  cpuFilters,
  lexicalRelevance,
  normaliseText,
  queryTerms,
  REPEAT_CHECK_MAX_BYTES,
  repeatsHistory,
  repeatsHistoryOf,
} from '../../src/cpu-stage/cpu-filters.js';
import {
  type CandidateFields,
  type CpuFilters,
  type CpuTaskScalars,
  runCpuTask,
} from '../../src/cpu-stage/cpu-task.js';
import { encodeHistory } from '../../src/request/history-bytes.js';
import { monotonicNow } from '../../src/util/clock.js';
import { contextServiceDefinition, type MemoryUsed } from '../../src/wire/proto.js';
import { splicedText } from '../../src/wire/spliced.js';
import type { ChatMessage } from '../../src/wire/types.js';

const user = (content: string): ChatMessage => ({ role: 'user', content });

describe('normaliseText', () => {
  it('folds case, NFC, and collapses punctuation and whitespace runs', () => {
    expect(normaliseText('  Hello,   World!! ')).toBe('hello world');
    expect(normaliseText('Cafe\u0301 — OK?')).toBe(normaliseText('CAFÉ ok'));
    expect(normaliseText('...')).toBe('');
  });
});

describe('repeatsHistory', () => {
  const history = [
    user('Caroline said: I went to the LGBTQ support group yesterday, it was powerful!'),
    user('Sounds good.'),
  ];

  it('finds a memory equal to a message, whatever its case and punctuation', () => {
    expect(repeatsHistory(history, ['sounds GOOD', 'sounds great'])).toEqual([true, false]);
  });

  it('finds a memory of 4+ words contained in a message on word boundaries', () => {
    expect(
      repeatsHistory(history, [
        'I went to the LGBTQ support group yesterday',
        'went to the LGBTQ support groups',
        'support group', // too short to count inside a longer message
        'Melanie: I went to the LGBTQ support group yesterday.', // after its speaker label
      ]),
    ).toEqual([true, false, false, true]);
  });

  it('decides ASCII memories from their bytes as it does from their text', () => {
    const history2 = [
      ...history,
      user('Caroline'),
      user('Ünïcode wörds and the K\u212A sign: k'),
      user('snake_case words: a_b c'),
    ];
    const memories = [
      'sounds GOOD',
      'sounds great',
      'I went to the LGBTQ support group yesterday',
      'Melanie: I went to the LGBTQ support group yesterday.',
      'Melanie: I went to the LGBTQ support group tomorrow.',
      'Caroline:',
      'Caroline:   ',
      ': sounds good',
      'Sounds: good',
      `${'x'.repeat(64)}: sounds good`,
      `${'x'.repeat(65)}: sounds good`,
      'line\nbreak: sounds good',
      'Ünïcode wörds and the',
      'the KK sign k',
      'A_B c',
      '...',
      '',
      'CAROLINE SAID: I went to the LGBTQ support group yesterday, it was POWERFUL',
    ];
    const bytes = memories.map((m) => Buffer.from(m, 'utf8'));
    const fromText = repeatsHistory(history2, memories);
    const fromBytes = repeatsHistoryOf(
      history2,
      memories.length,
      (k) => memories[k]!,
      (k) => ({ bytes: bytes[k]!, start: 0, end: bytes[k]!.length }),
    );
    expect(fromBytes).toEqual(fromText);
    expect(fromText.filter(Boolean).length).toBeGreaterThan(4);
  });

  it('is one pass over the history: a max-size history against 1,000 memories', () => {
    // The contract's largest history: 100 messages of 32,768 code points.
    const words = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'];
    const message = (k: number) => {
      let s = '';
      for (let i = 0; s.length < 32_700; i++) s += `${words[(i * 7 + k) % words.length]} w${(i + k) % 997} `;
      return user(s.slice(0, 32_768));
    };
    const big = Array.from({ length: 100 }, (_, k) => message(k));
    const memories = Array.from({ length: 1000 }, (_, i) =>
      i % 10 === 0 ? 'alpha w0 gamma w3 epsilon' : `memory ${i} alpha beta gamma delta about w${i}`,
    );
    // One memory that is a run of 6 words from the middle of message 50.
    memories[1] = big[50]!.content.split(' ').slice(400, 406).join(' ').toUpperCase();
    const t0 = performance.now();
    const out = repeatsHistory(big, memories);
    const ms = performance.now() - t0;
    expect(out.flatMap((hit, i) => (hit ? [i] : []))).toEqual([1]);
    // Warm, on a loaded 2-core machine: 170-420 ms (docs/scoring.md); cold JIT up to ~0.9 s.
    expect(ms).toBeLessThan(3_000);
  });
});

describe('lexicalRelevance', () => {
  const terms = queryTerms('When did Caroline go to the support group?');

  it('is the share of the query’s content terms the content holds, in [0, 1]', () => {
    expect([...terms].sort()).toEqual(['caroline', 'group', 'support']);
    expect(lexicalRelevance(terms, 'Caroline joined a support group.')).toBe(1);
    expect(lexicalRelevance(terms, 'Caroline likes tea')).toBeCloseTo(1 / 3, 12);
  });

  it('is 0 for a content sharing nothing with the query, and for a query without content terms', () => {
    expect(lexicalRelevance(terms, 'Melanie paints sunsets')).toBe(0);
    expect(lexicalRelevance(queryTerms('what is it?'), 'what is it')).toBe(0);
  });
});

describe('cpuFilters', () => {
  const filters: CpuFilters = {
    history: true,
    query: 'support group',
    relevanceFloor: 0.15,
    relevanceWeight: 0.5,
    maxMemories: 0,
  };
  const contents = ['support group on Friday', 'paints sunsets', 'likes tea', 'the group met'];

  it('measures NaN relevances lexically, adds w_rel × it to the score and filters below the floor', () => {
    const score = Float64Array.of(0.2, 0.2, 0.3, 0.4);
    const relevance = Float64Array.of(Number.NaN, Number.NaN, 0.9, Number.NaN);
    const out = cpuFilters({
      packCount: 4,
      ids: ['a', 'b', 'c', 'd'],
      content: (i) => contents[i]!,
      score,
      relevance,
      history: [],
      filters,
    });
    expect(Array.from(relevance)).toEqual([1, 0, 0.9, 0.5]);
    expect(Array.from(score)).toEqual([0.7, 0.2, 0.3, 0.65]);
    expect(out).toEqual({ pack: [0, 2, 3], filtered: [1] });
  });

  it('never decodes a memory over REPEAT_CHECK_MAX_BYTES for the history check (it is not filtered)', () => {
    const decoded: number[] = [];
    const out = cpuFilters({
      packCount: 2,
      ids: ['a', 'b'],
      content: (i) => {
        decoded.push(i);
        return 'likes tea';
      },
      contentBytes: (i) => (i === 0 ? REPEAT_CHECK_MAX_BYTES + 1 : 9),
      score: Float64Array.of(0.5, 0.5),
      relevance: Float64Array.of(0.5, 0.5),
      history: [{ role: 'user', content: 'Likes tea.' }],
      filters: { ...filters, relevanceFloor: 0 },
    });
    expect(decoded).toEqual([1]);
    expect(out).toEqual({ pack: [0], filtered: [1] });
  });

  it('drops history repeats, then cuts to max_memories by (score desc, memory_id asc)', () => {
    const out = cpuFilters({
      packCount: 4,
      ids: ['d', 'c', 'b', 'a'],
      content: (i) => contents[i]!,
      score: Float64Array.of(0.9, 0.5, 0.5, 0.1),
      relevance: Float64Array.of(0.5, 0.5, 0.5, 0.5),
      history: [user('Support group on Friday!')],
      filters: { ...filters, maxMemories: 1 },
    });
    // 0 repeats the history; of 1 and 2 (equal scores) "b" wins; 3 is cut too.
    expect(out).toEqual({ pack: [2], filtered: [0, 1, 3] });
  });
});

const GPT = CapabilityCatalog.create().resolve('gpt-4o');

function scalars(over: Partial<CpuTaskScalars> = {}): CpuTaskScalars {
  return {
    budget: 0,
    dpCellCeiling: 437_570,
    maxConsecutiveSkips: 5,
    nonce: 'n0nce',
    directive: null,
    recentMessages: [],
    toolSchemas: [],
    deadline: monotonicNow() + 60_000,
    budgetModel: GPT,
    nonceBytes: 16,
    availableTokens: 0,
    ...over,
  };
}

function rowsOf(bytes: Uint8Array): MemoryUsed[] {
  return (
    contextServiceDefinition.AssembleContext!.responseDeserialize(Buffer.from(bytes)) as {
      memories_used: MemoryUsed[];
    }
  ).memories_used;
}

const DAY = Date.UTC(2023, 4, 8, 13, 56);
const cands: CandidateFields[] = [
  {
    memory_id: 'm-1',
    category: 'episodic',
    content: 'Caroline went to the support group yesterday',
    score: 0.5,
    similarity: 0.4,
    confidence: 0.8,
    rank: 1,
    relevance: 0.7,
    recency: 0.25,
    usefulness: 0.5,
    created_at_ms: DAY,
  },
  {
    memory_id: 'm-2',
    category: 'factual',
    content: 'Melanie paints sunsets',
    score: 0.3,
    similarity: 0.9, // a write-time score, not relevance to this query
    confidence: 0.8,
    rank: 1,
    relevance: Number.NaN,
    recency: 0.5,
    usefulness: 0.5,
    created_at_ms: DAY,
  },
  {
    memory_id: 'm-3',
    category: 'factual',
    content: 'Caroline researches adoption agencies',
    score: 0.3,
    similarity: 0.2,
    confidence: 0.8,
    rank: 2,
    relevance: Number.NaN,
    recency: 0.5,
    usefulness: 0.5,
  },
];

describe('runCpuTask with the filters', () => {
  const history = [user('Caroline went to the support group yesterday.')];
  const filters: CpuFilters = {
    history: true,
    query: 'what does Caroline research?',
    relevanceFloor: 0.15,
    relevanceWeight: 0.5,
    maxMemories: 0,
  };

  it('writes history repeats and unrelated hot hits as `filter` rows with the scores the composite used', () => {
    const out = runCpuTask(
      encodeCandidates(cands, scalars({ packCount: 3, filters }), encodeHistory(history)),
    );
    expect(out.invalid).toBeNull();
    expect(Array.from(out.selected)).toEqual([2]);
    expect(Array.from(out.filtered)).toEqual([0, 1]);
    const rows = rowsOf(out.memory_rows);
    expect(rows.map((r) => [r.memory_id, r.exclusion])).toEqual([
      ['m-3', 'included'],
      ['m-1', 'filter'],
      ['m-2', 'filter'],
    ]);
    const [m3, m1, m2] = rows;
    expect(m1).toMatchObject({
      relevance_score: expect.closeTo(0.7, 6),
      recency_score: 0.25,
      usefulness_score: 0.5,
    });
    // Lexical: "caroline" and "research" are the terms; m-3 holds "caroline" only ("researches" differs).
    expect(m3!.relevance_score).toBe(0.5);
    expect(m3!.composite_score).toBeCloseTo(0.3 + 0.5 * 0.5, 6);
    expect(m2).toMatchObject({ relevance_score: 0, similarity: expect.closeTo(0.9, 6) });
    expect(splicedText(out.assembled_utf8!)).not.toContain('support group yesterday</');
  });

  it('keeps a history repeat when the filters are off (vectors and benches)', () => {
    const plain = cands.map((c) => ({ ...c, relevance: 0.5 }));
    const out = runCpuTask(encodeCandidates(plain, scalars({ packCount: 3 }), encodeHistory(history)));
    expect(Array.from(out.selected).sort()).toEqual([0, 1, 2]);
    expect(Array.from(out.filtered)).toEqual([]);
  });
});

describe('runCpuTask with memory dates', () => {
  const plain = cands.map((c) => ({ ...c, relevance: 0.5 }));

  it('writes each dated memory’s ISO date as an attribute, and counts it in the block’s cost', () => {
    const off = runCpuTask(encodeCandidates(plain, scalars()));
    const on = runCpuTask(encodeCandidates(plain, scalars({ memoryDates: true })));
    const offText = splicedText(off.assembled_utf8!);
    const onText = splicedText(on.assembled_utf8!);
    expect(offText).not.toContain('date=');
    expect(onText).toContain('category="episodic" date="2023-05-08">');
    expect(onText).toContain('category="factual" date="2023-05-08">');
    // m-3 has no date: no attribute.
    expect(onText.match(/ date="/g)).toHaveLength(2);
    expect(on.costs[0]!).toBeGreaterThan(off.costs[0]!);
    expect(on.costs[2]!).toBe(off.costs[2]!);
    expect(on.tokens_used!).toBeGreaterThan(off.tokens_used!);
  });

  it('holds the budget invariant: what is packed, dated, fits the usable budget', () => {
    for (const budget of [40, 60, 80, 120]) {
      const on = runCpuTask(encodeCandidates(plain, scalars({ memoryDates: true, availableTokens: budget })));
      const packedCost = Array.from(on.selected).reduce((s, i) => s + on.costs[i]!, 0);
      expect(packedCost).toBeLessThanOrEqual(on.budget!.usable_budget);
    }
  });
});
