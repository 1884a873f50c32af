import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { applyMaxMemories, dedupeAndScore, interimScore } from '../../src/ranking/score.js';
import type { MemoryHit } from '../../src/wire/types.js';

const hit = (
  id: string,
  similarity: number,
  confidence: number,
  rank: number,
  source = 'hot',
): MemoryHit => ({
  memory_id: id,
  org_id: 'o',
  agent_id: 'a',
  content: `${id}-${source}`,
  category: 'factual',
  confidence,
  similarity,
  rank,
  source,
});

interface PackVector {
  name: string;
  input: { candidates: { memory_id: string; similarity: number; confidence: number }[] };
  expect: { exact_match: boolean; reference: { memory_ids: string[]; total_score: number } };
}

describe('interim score (contract.md §7)', () => {
  it('the scores of every exact pack vector sum, in output order, to its reference total_score', () => {
    const doc = JSON.parse(
      readFileSync(fileURLToPath(new URL('../vectors/pack.json', import.meta.url)), 'utf8'),
    ) as { vectors: PackVector[] };
    const exact = doc.vectors.filter((v) => v.expect.exact_match);
    expect(exact.length).toBeGreaterThan(50);
    for (const v of exact) {
      const byId = new Map(v.input.candidates.map((c) => [c.memory_id, c]));
      let total = 0;
      for (const id of v.expect.reference.memory_ids) {
        const c = byId.get(id)!;
        total += interimScore(c.similarity, c.confidence);
      }
      expect(total, v.name).toBe(v.expect.reference.total_score);
    }
  });

  it('spans [0, 1]: both inputs 0 score 0, both 1 score 1', () => {
    expect(interimScore(0, 0)).toBe(0);
    expect(interimScore(1, 1)).toBe(1);
  });
});

describe('dedupeAndScore', () => {
  it('keeps first-appearance order and replaces only on a strictly better score or an equal score with lower rank', () => {
    const out = dedupeAndScore(
      [hit('x', 0.5, 0.5, 3), hit('y', 0.9, 0.1, 1), hit('z', 0.2, 0.2, 2)],
      [
        hit('y', 0.9, 0.1, 1, 'cold'),
        hit('x', 0.5, 0.5, 2, 'cold'),
        hit('z', 0.1, 0.1, 1, 'cold'),
        hit('w', 1, 1, 1, 'cold'),
      ],
    );
    expect(out.map((c) => c.memory_id)).toEqual(['x', 'y', 'z', 'w']);
    expect(out.map((c) => c.source)).toEqual(['cold', 'hot', 'hot', 'cold']);
    expect(out[0]!.score).toBe(interimScore(0.5, 0.5));
  });
});

describe('applyMaxMemories', () => {
  it('keeps the top N by (score desc, id asc) in input order and filters the rest', () => {
    const cands = dedupeAndScore(
      [hit('c', 0.5, 0.5, 1), hit('b', 0.9, 0.9, 2), hit('a', 0.5, 0.5, 3), hit('d', 0.1, 0.1, 4)],
      [],
    );
    const { kept, filtered } = applyMaxMemories(cands, 2);
    expect(kept.map((c) => c.memory_id)).toEqual(['b', 'a']);
    expect(filtered.map((c) => c.memory_id)).toEqual(['c', 'd']);
    expect(applyMaxMemories(cands, 0).kept).toHaveLength(4);
  });
});
