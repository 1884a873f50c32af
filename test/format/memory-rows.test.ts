/**
 * The `memories_used` bytes (src/format/memory-rows.ts) are exactly what the loader writes for
 * the row objects the main thread used to build (usedRow below): the CPU stage's, for any candidates and
 * any pack outcome, and the degraded answer's (`failed` / `filter`, or with the memories it kept).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { CpuCandidate } from '../../src/cpu-stage/cpu-batch.js';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import { encodeDegradedRows, encodeMemoryRows, type RowFields } from '../../src/format/memory-rows.js';
import { contextServiceDefinition, type MemoryUsed } from '../../src/wire/proto.js';

const SCALARS = {
  budget: 0,
  dpCellCeiling: 1000,
  maxConsecutiveSkips: 5,
  nonce: 'n',
  directive: null,
  recentMessages: [],
  toolSchemas: [],
  deadline: 0,
};

/** One MemoryUsed row of a scored candidate as the answers built it before rows became bytes. */
function usedRow(c: RowFields, exclusion: MemoryUsed['exclusion'], tokens: number): MemoryUsed {
  return {
    memory_id: c.memory_id,
    composite_score: c.score,
    relevance_score: c.similarity,
    recency_score: 0,
    usefulness_score: 0,
    rank: c.rank,
    category: c.category,
    exclusion,
    similarity: c.similarity,
    confidence: c.confidence,
    token_estimate: tokens,
  };
}

/** The loader's bytes for a message that holds only these rows (field 4 repeated, nothing else). */
function loaderBytes(rows: MemoryUsed[]): Buffer {
  return contextServiceDefinition.AssembleContext!.responseSerialize({ memories_used: rows }) as Buffer;
}

/** The rows as answerFromStage built them before the CPU stage encoded them. */
function objectRows(
  cands: CpuCandidate[],
  selected: number[],
  excluded: number[],
  packCount: number,
  costs: Int32Array,
) {
  const scored = cands.map((c) => ({ ...c, org_id: '', agent_id: '', source: 'hot' }));
  return [
    ...selected.map((i) => usedRow(scored[i]!, 'included', costs[i]!)),
    ...excluded.map((i) => usedRow(scored[i]!, 'budget', costs[i]!)),
    ...scored.slice(packCount).map((c, j) => usedRow(c, 'filter', costs[packCount + j]!)),
  ];
}

const candidate = fc.record({
  memory_id: fc.string({ unit: 'binary', maxLength: 60 }),
  category: fc.string({ unit: 'binary', maxLength: 200 }),
  content: fc.string({ maxLength: 20 }),
  score: fc.double({ noNaN: true, min: -2, max: 2 }),
  similarity: fc.double({ noNaN: true, min: -1, max: 1 }),
  confidence: fc.double({ noNaN: true, min: 0, max: 1 }),
  rank: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
  tokens: fc.constant(0),
});

describe('encodeMemoryRows', () => {
  it('writes the loader’s bytes for the rows usedRow builds, in included / budget / filter order', () => {
    fc.assert(
      fc.property(
        fc.array(candidate, { maxLength: 40 }),
        fc.integer({ min: 0, max: 40 }),
        fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { minLength: 40, maxLength: 40 }),
        fc.infiniteStream(fc.boolean()),
        (cands, cut, costList, picks) => {
          const packCount = Math.min(cut, cands.length);
          const it = picks[Symbol.iterator]();
          const selected: number[] = [];
          const excluded: number[] = [];
          for (let i = 0; i < packCount; i++) (it.next().value ? selected : excluded).push(i);
          selected.reverse(); // packed order need not be index order
          const costs = Int32Array.from(costList.slice(0, cands.length));
          const input = encodeCandidates(cands, SCALARS);
          const bytes = encodeMemoryRows(input, {
            selected: Int32Array.from(selected),
            excluded: Int32Array.from(excluded),
            packCount,
            costs,
          });
          expect(Buffer.from(bytes)).toEqual(
            loaderBytes(objectRows(cands, selected, excluded, packCount, costs)),
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a real row decodes to its fields (UUID id, scores as float32, exclusion, token estimate)', () => {
    const c: CpuCandidate = {
      memory_id: '3f0b5c2e-8a41-4c1e-9a57-2d6f0e1b7c90',
      category: 'preference',
      content: 'likes tea',
      score: 0.8125,
      similarity: 0.75,
      confidence: 0.5,
      rank: 3,
      tokens: 0,
    };
    const input = encodeCandidates([c, { ...c, memory_id: 'b', rank: 4 }], SCALARS);
    const bytes = encodeMemoryRows(input, {
      selected: Int32Array.of(0),
      excluded: Int32Array.of(),
      packCount: 1,
      costs: Int32Array.of(42, 7),
    });
    const decoded = contextServiceDefinition.AssembleContext!.responseDeserialize(Buffer.from(bytes)) as {
      memories_used: MemoryUsed[];
    };
    expect(decoded.memories_used).toEqual([
      {
        memory_id: c.memory_id,
        composite_score: 0.8125,
        relevance_score: 0.75,
        recency_score: 0,
        usefulness_score: 0,
        rank: 3,
        category: 'preference',
        exclusion: 'included',
        similarity: 0.75,
        confidence: 0.5,
        token_estimate: 42,
      },
      expect.objectContaining({ memory_id: 'b', rank: 4, exclusion: 'filter', token_estimate: 7 }),
    ]);
  });

  it('refuses an index outside the candidates', () => {
    const input = encodeCandidates([], SCALARS);
    expect(() =>
      encodeMemoryRows(input, {
        selected: Int32Array.of(0),
        excluded: Int32Array.of(),
        packCount: 0,
        costs: Int32Array.of(),
      }),
    ).toThrow(RangeError);
  });
});

describe('encodeDegradedRows', () => {
  it('writes the loader’s bytes for `failed` rows of the kept candidates, then `filter` rows, token_estimate 0', () => {
    fc.assert(
      fc.property(
        fc.array(candidate, { maxLength: 40 }),
        fc.array(candidate, { maxLength: 10 }),
        (kept, filtered) => {
          const bytes = encodeDegradedRows(kept, filtered);
          expect(Buffer.from(bytes)).toEqual(
            loaderBytes([
              ...kept.map((c) => usedRow(c, 'failed', 0)),
              ...filtered.map((c) => usedRow(c, 'filter', 0)),
            ]),
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it('writes the loader’s bytes for a stepped degraded answer: included, budget (with costs), failed, filter', () => {
    fc.assert(
      fc.property(
        fc.array(candidate, { maxLength: 40 }),
        fc.array(candidate, { maxLength: 10 }),
        fc.array(fc.constantFrom('included', 'budget', 'failed'), { maxLength: 40 }),
        fc.array(fc.integer({ min: 1, max: 100_000 }), { maxLength: 40 }),
        (kept, filtered, kindsIn, costsIn) => {
          const kinds = kept.map((_, i) => kindsIn[i] ?? 'failed');
          const costs = Int32Array.from(kept, (_, i) => costsIn[i] ?? 1);
          const included = kinds.flatMap((k, i) => (k === 'included' ? [i] : []));
          const excluded = kinds.flatMap((k, i) => (k === 'budget' ? [i] : []));
          const bytes = encodeDegradedRows(kept, filtered, { included, excluded, costs });
          expect(Buffer.from(bytes)).toEqual(
            loaderBytes([
              ...included.map((i) => usedRow(kept[i]!, 'included', costs[i]!)),
              ...excluded.map((i) => usedRow(kept[i]!, 'budget', costs[i]!)),
              ...kept.flatMap((c, i) => (kinds[i] === 'failed' ? [usedRow(c, 'failed', 0)] : [])),
              ...filtered.map((c) => usedRow(c, 'filter', 0)),
            ]),
          );
        },
      ),
      { numRuns: 200 },
    );
  });

  it('no candidates, no rows', () => {
    expect(encodeDegradedRows([], []).byteLength).toBe(0);
  });
});
