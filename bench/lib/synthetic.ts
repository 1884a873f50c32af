/**
 * Seeded synthetic candidates for benchmarks (fixed seed ⇒ the same shapes every run).
 */

import type { CpuCandidate, CpuTaskScalars } from '../../src/cpu-stage/cpu-task.js';
import { interimScore } from '../../src/ranking/score.js';
import { type EstimateKind, estimateTokens } from '../../src/text/estimate.js';
import { seededRandom } from '../../src/tools/client/request-source.js';
import { monotonicNow } from '../../src/util/clock.js';

export { seededRandom };

const ALPHABET = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 .,;:!?<>&"\'中文日本語😀';

/** Random text of `length` characters from a mixed alphabet (ASCII, markup characters, CJK, emoji). */
export function randomText(rand: () => number, length: number): string {
  const chars = Array.from(ALPHABET);
  let s = '';
  for (let i = 0; i < length; i++) s += chars[Math.floor(rand() * chars.length)];
  return s;
}

/**
 * `c` as a CPU-stage candidate: its interim score (contract.md §7) as the packer's value and `tokens` as its cost.
 * For the benches and the pool's vector test, which start from contract.md §13 pack-shaped candidates.
 */
export function toCpuCandidate(c: Omit<SyntheticCandidate, 'source'>, tokens: number): CpuCandidate {
  return {
    memory_id: c.memory_id,
    category: c.category,
    content: c.content,
    score: interimScore(c.similarity, c.confidence),
    similarity: c.similarity,
    confidence: c.confidence,
    rank: c.rank,
    tokens,
  };
}

/** One synthetic candidate. */
export interface SyntheticCandidate {
  memory_id: string;
  content: string;
  category: string;
  similarity: number;
  confidence: number;
  rank: number;
  source: string;
}

const CATEGORIES = ['procedural', 'factual', 'preference', 'behavioral', 'episodic', 'other'];

/** `n` candidates with contents of `minChars`..`maxChars` characters. */
export function syntheticCandidates(
  seed: number,
  n: number,
  minChars = 40,
  maxChars = 4000,
): SyntheticCandidate[] {
  const rand = seededRandom(seed);
  return Array.from({ length: n }, (_, i) => {
    const hex = Math.floor(rand() * 2 ** 32)
      .toString(16)
      .padStart(8, '0');
    return {
      memory_id: `${hex}-0000-4000-8000-${String(i).padStart(12, '0')}`,
      content: randomText(rand, minChars + Math.floor(rand() * (maxChars - minChars + 1))),
      category: CATEGORIES[Math.floor(rand() * CATEGORIES.length)]!,
      similarity: Math.round(rand() * 1000) / 1000,
      confidence: Math.round(rand() * 1000) / 1000,
      rank: i + 1,
      source: 'vector',
    };
  });
}

/** Columns the packer takes, from candidates and an estimate kind. */
export function packColumns(candidates: readonly SyntheticCandidate[], kind: EstimateKind) {
  const n = candidates.length;
  const scores = new Float64Array(n);
  const tokens = new Int32Array(n);
  candidates.forEach((c, i) => {
    scores[i] = interimScore(c.similarity, c.confidence);
    tokens[i] = estimateTokens(c.content, kind);
  });
  return { ids: candidates.map((c) => c.memory_id), scores, tokens };
}

/**
 * A CPU task's scalars for benches and tests: the default DP ceiling (437,570 cells) and skip limit (5), no
 * directive, history or tool schemas, budget 0, nonce `n` and a minute to run; `over` replaces any of them.
 */
export function taskScalars(over: Partial<CpuTaskScalars> = {}): CpuTaskScalars {
  return {
    budget: 0,
    dpCellCeiling: 437_570,
    maxConsecutiveSkips: 5,
    nonce: 'n',
    directive: null,
    recentMessages: [],
    toolSchemas: [],
    deadline: monotonicNow() + 60_000,
    ...over,
  };
}
