/**
 * Interim score, dedupe and the max_memories cut (contract.md §7, ADR-0069 §2).
 */
import { compareCodePoints } from '../text/code-point-order.js';
import type { MemoryHit, ScoredCandidate } from '../wire/types.js';

/** Score schema label sent in every response. */
export const SCORE_SCHEMA = 'interim_v1';

/**
 * Interim score `0.85 × similarity + 0.15 × confidence` in float64. Not the memory service's composite.
 * Both inputs must be finite and in [0,1] (validated at retrieval, contract.md §4.1).
 */
export function interimScore(similarity: number, confidence: number): number {
  return 0.85 * similarity + 0.15 * confidence;
}

/** Orders candidates canonically: score descending, then memory_id ascending by code point. */
export function compareCanonical(
  a: { score: number; memory_id: string },
  b: { score: number; memory_id: string },
) {
  return b.score - a.score || compareCodePoints(a.memory_id, b.memory_id);
}

/**
 * Scores hot (first) then cold hits and dedupes by exact memory_id: a later copy replaces the kept one only
 * if its score is strictly higher, or equal with a strictly lower rank; a full tie keeps the first (hot)
 * copy. Output keeps the order of first appearance.
 */
export function dedupeAndScore(hot: readonly MemoryHit[], cold: readonly MemoryHit[]): ScoredCandidate[] {
  return dedupeScored(hot, cold, (hit) => scoredCandidate(hit, interimScore(hit.similarity, hit.confidence)));
}

/**
 * A hit as a candidate with its score. Fields written out, not `{ ...hit, score }`: V8 11 adds a property
 * after a spread through its runtime, ~1 µs per candidate on the event loop.
 */
export function scoredCandidate(hit: MemoryHit, score: number): ScoredCandidate {
  return {
    memory_id: hit.memory_id,
    org_id: hit.org_id,
    agent_id: hit.agent_id,
    content: hit.content,
    category: hit.category,
    confidence: hit.confidence,
    similarity: hit.similarity,
    rank: hit.rank,
    source: hit.source,
    created_at_ms: hit.created_at_ms,
    score,
  };
}

/**
 * The dedupe rule of every schema (contract.md §7): hot (first) then cold hits, each scored by `score`; a
 * later copy of a memory_id replaces the kept one only if its score is strictly higher, or equal with a
 * strictly lower rank. Output keeps the order of first appearance.
 */
export function dedupeScored(
  hot: readonly MemoryHit[],
  cold: readonly MemoryHit[],
  score: (hit: MemoryHit) => ScoredCandidate,
): ScoredCandidate[] {
  const out: ScoredCandidate[] = [];
  const position = new Map<string, number>();
  for (const list of [hot, cold]) {
    for (const hit of list) {
      const candidate = score(hit);
      const at = position.get(hit.memory_id);
      if (at === undefined) {
        position.set(hit.memory_id, out.length);
        out.push(candidate);
        continue;
      }
      const kept = out[at]!;
      if (candidate.score > kept.score || (candidate.score === kept.score && candidate.rank < kept.rank)) {
        out[at] = candidate;
      }
    }
  }
  return out;
}

/**
 * The `max_memories` cut: 0 = no cap; otherwise keeps the top `maxMemories` by (score desc, memory_id asc).
 * @returns kept candidates in their input order, and the rest (exclusion `filter`).
 */
export function applyMaxMemories<T extends { score: number; memory_id: string }>(
  candidates: readonly T[],
  maxMemories: number,
): { kept: T[]; filtered: T[] } {
  if (maxMemories <= 0 || candidates.length <= maxMemories) return { kept: [...candidates], filtered: [] };
  const top = new Set([...candidates].sort(compareCanonical).slice(0, maxMemories));
  const kept: T[] = [];
  const filtered: T[] = [];
  for (const c of candidates) (top.has(c) ? kept : filtered).push(c);
  return { kept, filtered };
}
