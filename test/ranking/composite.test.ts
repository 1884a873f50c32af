import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadRankingSettings } from '../../src/config/ranking-settings.js';
import { DEFAULT_WEIGHTS, effectiveWeights, halfLifeDays, recency } from '../../src/ranking/composite.js';
import { rankCandidates } from '../../src/ranking/rank-stage.js';
import { coldRelevance } from '../../src/ranking/relevance.js';
import { requestWeights } from '../../src/ranking/request-weights.js';
import type { BranchOutcome, MemoryHit } from '../../src/wire/types.js';

const ORG = '11111111-1111-4111-8111-111111111111';
const AGENT = '22222222-2222-4222-8222-222222222222';
const DAY = 86_400_000;

function hit(id: number, source: string, similarity: number, extra: Partial<MemoryHit> = {}): MemoryHit {
  return {
    memory_id: `00000000-0000-4000-8000-${String(id).padStart(12, '0')}`,
    org_id: ORG,
    agent_id: AGENT,
    content: `memory ${id}`,
    category: 'episodic',
    confidence: 0.7,
    similarity,
    rank: id,
    source,
    ...extra,
  };
}
const coldOk: BranchOutcome[] = [{ name: 'cold', status: 'success', latency_ms: 1, detail: '' }];

describe('relevance (contract.md §7)', () => {
  it('scales text-search scores by the best of the call: x = s/(1−s), relevance = x / x_best', () => {
    // s = 0.8 → x = 4; s = 0.5 → x = 1; a memory service's similarity is kept.
    const r = coldRelevance([hit(1, 'fts', 0.8), hit(2, 'fts', 0.5), hit(3, 'vector', 0.42)]);
    expect(r[0]).toBe(1);
    expect(r[1]).toBeCloseTo(0.25, 12);
    expect(r[2]).toBe(0.42);
  });
});

describe('composite_v1', () => {
  const settings = loadRankingSettings({});

  it('filters a hot memory the search did not return (relevance 0 < floor) and keeps a relevant one', () => {
    const hot = [hit(1, 'hot', 0.9), hit(2, 'hot', 0.9)];
    const cold = [hit(2, 'fts', 0.8), hit(3, 'fts', 0.5)];
    const out = rankCandidates({ maxMemories: 0 }, { hot, cold, branches: coldOk }, settings);
    expect(out.scoreSchema).toBe('composite_v1');
    expect(out.kept.map((c) => c.rank)).toEqual([2, 3]);
    expect(out.kept[0]!.relevance).toBe(1);
    expect(out.filtered.map((c) => c.rank)).toEqual([1]);
  });

  it('values relevance raised to the exponent; the floor compares the relevance itself', () => {
    // x = 4, 2 → relevance 1, 0.5; exponent 4 → 0.9 · 1 and 0.9 · 0.0625 (recency 0: no date).
    const cold = [hit(1, 'fts', 0.8), hit(2, 'fts', 2 / 3)];
    const out = rankCandidates({ maxMemories: 0 }, { hot: [], cold, branches: coldOk }, settings);
    expect(settings.relevanceExponent).toBe(4);
    expect(out.kept[1]!.relevance).toBeCloseTo(0.5, 12);
    expect(out.kept[1]!.score).toBeCloseTo(0.9 * 0.0625, 12);
    expect(out.kept[0]!.score).toBeCloseTo(0.9, 12);
    const linear = loadRankingSettings({ IBEX_CONTEXT_RELEVANCE_EXPONENT: '1' });
    const lin = rankCandidates({ maxMemories: 0 }, { hot: [], cold, branches: coldOk }, linear);
    expect(lin.kept[1]!.score).toBeCloseTo(0.9 * 0.5, 12);
    expect(() => loadRankingSettings({ IBEX_CONTEXT_RELEVANCE_EXPONENT: '0.5' })).toThrow(
      /IBEX_CONTEXT_RELEVANCE_EXPONENT/,
    );
  });

  it('a memory service’s hot hit the search did not return is left to the CPU stage (relevance NaN)', () => {
    const hot = [hit(1, 'hot', 0.9, { created_at_ms: Date.UTC(2023, 4, 8) }), hit(2, 'hot', 0.9)];
    const cold = [hit(2, 'vector', 0.8)];
    const out = rankCandidates(
      { maxMemories: 1, query: 'tea' },
      { hot, cold, branches: coldOk },
      settings,
      Date.now(),
      true,
    );
    // Not below the floor here; max_memories is the CPU stage's too, so `eligible` holds both.
    expect(out.eligible.map((c) => c.rank)).toEqual([1, 2]);
    expect(out.belowFloor).toEqual([]);
    expect(out.eligible[0]!.relevance).toBeNaN();
    expect(out.eligible[0]!.created_at_ms).toBe(Date.UTC(2023, 4, 8));
    expect(out.eligible[1]!.relevance).toBeCloseTo(0.8, 12);
    expect(out.relevanceWeight).toBe(effectiveWeights(settings.weights, null).relevance);
    expect(out.floor).toBe(settings.relevanceFloor);
    // Without a query there is nothing to measure against: relevance 0 as for any unsearched hot hit.
    const none = rankCandidates(
      { maxMemories: 0 },
      { hot, cold, branches: coldOk },
      settings,
      Date.now(),
      true,
    );
    expect(none.belowFloor.map((c) => c.rank)).toEqual([1]);
  });

  it('holds the candidates to the call’s own floor when one is given (a budget with room: candidate-limit.ts)', () => {
    // x = 4, 0.4 → relevance 1, 0.1: below the configured 0.15, above a large budget's 0.05.
    const cold = [hit(1, 'fts', 0.8), hit(2, 'fts', 0.4 / 1.4)];
    const tight = rankCandidates({ maxMemories: 0 }, { hot: [], cold, branches: coldOk }, settings);
    expect(tight.belowFloor.map((c) => c.rank)).toEqual([2]);
    const roomy = rankCandidates(
      { maxMemories: 0, floor: 0.05 },
      { hot: [], cold, branches: coldOk },
      settings,
    );
    expect(roomy.floor).toBe(0.05);
    expect(roomy.belowFloor).toEqual([]);
    expect(roomy.kept.map((c) => c.rank)).toEqual([1, 2]);
  });

  it('does not apply the floor when the search did not answer', () => {
    const out = rankCandidates(
      { maxMemories: 0 },
      { hot: [hit(1, 'hot', 0.9)], cold: [], branches: [{ ...coldOk[0]!, status: 'timeout' }] },
      settings,
    );
    expect(out.kept).toHaveLength(1);
  });

  it('interim_v1 keeps the old formula', () => {
    const out = rankCandidates(
      { maxMemories: 0 },
      { hot: [hit(1, 'hot', 0.9)], cold: [], branches: coldOk },
      loadRankingSettings({ IBEX_CONTEXT_SCORE_SCHEMA: 'interim_v1' }),
    );
    expect(out.scoreSchema).toBe('interim_v1');
    expect(out.kept[0]!.score).toBeCloseTo(0.85 * 0.9 + 0.15 * 0.7, 12);
  });

  it('recency halves every half-life, by category; several labels take the shortest', () => {
    const now = Date.UTC(2026, 0, 1);
    expect(recency('factual', now - 180 * DAY, now)).toBeCloseTo(0.5, 12);
    expect(recency('episodic', now - 28 * DAY, now)).toBeCloseTo(0.25, 12);
    expect(halfLifeDays('factual, behavioral')).toBe(30);
    expect(halfLifeDays('whatever')).toBe(14);
    expect(recency('episodic', undefined, now)).toBe(0);
  });

  it('refuses a relevance floor ≥ 0.5 at start-up, naming the variable', () => {
    expect(() => loadRankingSettings({ IBEX_CONTEXT_RELEVANCE_FLOOR: '0.5' })).toThrow(
      /IBEX_CONTEXT_RELEVANCE_FLOOR/,
    );
    expect(loadRankingSettings({ IBEX_CONTEXT_RELEVANCE_FLOOR: '0.3' }).relevanceFloor).toBe(0.3);
  });

  it('defaults: floor 0.15, at most 600 candidates (10..5000), relevance to the 4th power', () => {
    const d = loadRankingSettings({});
    expect([d.relevanceFloor, d.maxCandidates, d.relevanceExponent]).toEqual([0.15, 600, 4]);
    expect(loadRankingSettings({ IBEX_CONTEXT_MAX_CANDIDATES: '5000' }).maxCandidates).toBe(5000);
    expect(() => loadRankingSettings({ IBEX_CONTEXT_MAX_CANDIDATES: '5001' })).toThrow(
      /IBEX_CONTEXT_MAX_CANDIDATES/,
    );
  });

  it('neighbours of the 5 best hits by default (0..20, 0 = none)', () => {
    expect(loadRankingSettings({}).neighbourHits).toBe(5);
    expect(loadRankingSettings({ IBEX_CONTEXT_NEIGHBOUR_HITS: '0' }).neighbourHits).toBe(0);
    expect(loadRankingSettings({ IBEX_CONTEXT_NEIGHBOUR_HITS: '20' }).neighbourHits).toBe(20);
    for (const bad of ['21', '-1', '2.5', 'x']) {
      expect(() => loadRankingSettings({ IBEX_CONTEXT_NEIGHBOUR_HITS: bad })).toThrow(
        /IBEX_CONTEXT_NEIGHBOUR_HITS/,
      );
    }
  });

  it('per-request weights: negative or non-finite refused naming the field; normalised to sum 1', () => {
    expect(() => requestWeights([0, -1, 0, 0])).toThrow(/relevance_weight/);
    expect(() => requestWeights([Number.NaN, 1, 0, 0])).toThrow(/recency_weight/);
    expect(requestWeights([0, 0, 0, 0])).toBeNull();
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: 0, max: 100, noNaN: true }), { minLength: 4, maxLength: 4 }),
        (ws) => {
          const req = requestWeights(ws as [number, number, number, number]);
          const w = effectiveWeights(DEFAULT_WEIGHTS, req);
          const sum = w.relevance + w.recency + w.usefulness + w.confidence + w.frequency;
          expect(sum).toBeCloseTo(1, 9);
        },
      ),
    );
  });

  it('never keeps a candidate of another org, whatever the weights and limits', () => {
    // Retrieval drops foreign hits (validate.ts); ranking must not invent any: every kept or filtered
    // candidate is one of the inputs.
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 1, max: 50 }), fc.double({ min: 0, max: 0.99, noNaN: true })), {
          maxLength: 40,
        }),
        fc.array(fc.double({ min: 0, max: 10, noNaN: true }), { minLength: 4, maxLength: 4 }),
        fc.integer({ min: 0, max: 100 }),
        (rows, ws, maxMemories) => {
          const cold = rows.map(([id, s]) => hit(id, 'fts', s));
          const req = { maxMemories, weights: requestWeights(ws as [number, number, number, number]) };
          const out = rankCandidates(req, { hot: [], cold, branches: coldOk }, settings);
          for (const c of [...out.kept, ...out.filtered]) expect(c.org_id).toBe(ORG);
          expect(out.kept.length + out.filtered.length).toBe(new Set(cold.map((c) => c.memory_id)).size);
        },
      ),
    );
  });
});
