/** Interim score, dedupe and the max_memories cut (contract.md §7, ADR-0069 §2). */
import { compareCodePoints } from '../text/code-point-order.js';
import type { MemoryHit, ScoredCandidate } from '../wire/types.js';

export const SCORE_SCHEMA = 'interim_v1';

/** `0.85 × similarity + 0.15 × confidence`; inputs validated finite in [0,1] at retrieval. */
export function interimScore(similarity: number, confidence: number): number {
  return 0.85 * similarity + 0.15 * confidence;
}

/** Score descending, then memory_id ascending by code point. */
export function compareCanonical(
  a: { score: number; memory_id: string },
  b: { score: number; memory_id: string },
) {
  return b.score - a.score || compareCodePoints(a.memory_id, b.memory_id);
}

export function dedupeAndScore(hot: readonly MemoryHit[], cold: readonly MemoryHit[]): ScoredCandidate[] {
  return dedupeScored(hot, cold, (hit) => scoredCandidate(hit, interimScore(hit.similarity, hit.confidence)));
}

/** Fields written out, not spread: see docs/design/packing.md, "Object shapes". */
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

/** A later copy replaces the kept one only if its score is higher, or equal with a lower rank. */
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

/** 0 = no cap. @returns kept (input order) and the rest (exclusion `filter`). */
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
