/**
 * Packer quality on generated instances: a seeded generator of the instance families and
 * the exact optimum by a plain DP over exact token weights, so `bench:pack` reports quality beside timings.
 */

import { BUCKET_TOKENS, type PackInput, pack } from '../src/pack/packer.js';
import { interimScore } from '../src/ranking/score.js';
import { type EstimateKind, estimateFromLength } from '../src/text/estimate.js';
import { seededRandom } from './lib/synthetic.js';

/** The four size regimes of the generated instances. */
export const REGIMES = ['tiny', 'mixed', 'bench', 'near'] as const;
const FAMILIES: { family: string; kind: EstimateKind }[] = [
  { family: 'o200k_base', kind: 'chars_div_4' },
  { family: 'cl100k_base', kind: 'chars_div_4' },
  { family: 'claude', kind: 'runes_div_3_5' },
];

/** One generated instance: packer columns plus how it was drawn. */
export interface QualityInstance {
  regime: (typeof REGIMES)[number];
  family: string;
  ids: string[];
  scores: Float64Array;
  tokens: Int32Array;
  budget: number;
}

/**
 * Draws one instance: n 5–120, budget 50–20,000 on a log scale, a family (o200k/cl100k/claude), a regime
 * (tiny items of 0–120 characters; mixed sizes totalling 1.2–4× the budget; bench-like 40–4,000
 * characters; "near" items of 5–60 % of the budget), and in 20 % of instances one-decimal scores (ties).
 */
export function generateInstance(rand: () => number): QualityInstance {
  const n = 5 + Math.floor(rand() * 116);
  const budget = Math.round(50 * (20_000 / 50) ** rand());
  const { family, kind } = FAMILIES[Math.floor(rand() * FAMILIES.length)]!;
  const regime = REGIMES[Math.floor(rand() * REGIMES.length)]!;
  const oneDecimal = rand() < 0.2;
  // Characters per token of the family's estimate, to turn token targets into content lengths.
  const perToken = kind === 'chars_div_4' ? 4 : 3.5;
  const lengths = new Array<number>(n);
  if (regime === 'tiny') {
    for (let i = 0; i < n; i++) lengths[i] = Math.floor(rand() * 121);
  } else if (regime === 'bench') {
    for (let i = 0; i < n; i++) lengths[i] = 40 + Math.floor(rand() * 3961);
  } else if (regime === 'near') {
    for (let i = 0; i < n; i++) lengths[i] = Math.round(budget * (0.05 + 0.55 * rand()) * perToken);
  } else {
    // Heavy-tailed shares of a total of 1.2–4× the budget.
    const total = budget * (1.2 + 2.8 * rand()) * perToken;
    const shares = Array.from({ length: n }, () => (-Math.log(1 - rand())) ** 2);
    const sum = shares.reduce((a, b) => a + b, 0);
    for (let i = 0; i < n; i++) lengths[i] = Math.round((total * shares[i]!) / sum);
  }
  const ids: string[] = [];
  const scores = new Float64Array(n);
  const tokens = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    ids.push(`m-${String(Math.floor(rand() * 1e6)).padStart(6, '0')}-${i}`);
    scores[i] = oneDecimal
      ? Math.round(rand() * 10) / 10
      : interimScore(Math.round(rand() * 1000) / 1000, Math.round(rand() * 1000) / 1000);
    tokens[i] = estimateFromLength(lengths[i]!, kind);
  }
  return { regime, family, ids, scores, tokens, budget };
}

/** Exact optimum of the 0/1 knapsack over exact token weights (O(n × budget)); bench only. */
export function exactOptimum(scores: Float64Array, tokens: Int32Array, budget: number): number {
  const best = new Float64Array(budget + 1);
  for (let i = 0; i < scores.length; i++) {
    const w = tokens[i]!;
    const v = scores[i]!;
    if (w > budget || !(v > 0)) continue;
    for (let c = budget; c >= w; c--) {
      const cand = best[c - w]! + v;
      if (cand > best[c]!) best[c] = cand;
    }
  }
  return best[budget]!;
}

/** Quality summary over instances: ratio of total_score to the optimum. */
export interface QualitySummary {
  instances: number;
  mean: number;
  min: number;
  below_0999: number;
}

function summarize(ratios: number[]): QualitySummary {
  return {
    instances: ratios.length,
    mean: ratios.reduce((a, b) => a + b, 0) / ratios.length,
    min: Math.min(...ratios),
    below_0999: ratios.filter((r) => r < 0.999).length,
  };
}

/**
 * Runs the packer (ADR-0069 alone, ours without the branch-and-bound, and ours) on `count` DP-path instances drawn with `seed`, for each cell
 * ceiling. Instances where everything fits (trivially optimal) or the 16-token table exceeds the ceiling
 * (greedy path) are redrawn.
 * @returns one row per (ceiling, algorithm) with mean/min/below-0.999, and ours ≥ ADR-0069 checked.
 */
export function packQuality(seed: number, count: number, ceilings: readonly number[]) {
  const rows: ({ dp_cell_ceiling: number; algorithm: string } & QualitySummary)[] = [];
  let belowReference = 0;
  for (const ceiling of ceilings) {
    const rand = seededRandom(seed);
    const adr: number[] = [];
    const noSearch: number[] = [];
    const ours: number[] = [];
    while (ours.length < count) {
      const inst = generateInstance(rand);
      const sum = inst.tokens.reduce((a, b) => a + b, 0);
      const cells = inst.ids.length * (Math.max(1, Math.floor(inst.budget / BUCKET_TOKENS)) + 1);
      if (sum <= inst.budget || cells > ceiling) continue;
      const opt = exactOptimum(inst.scores, inst.tokens, inst.budget);
      if (opt <= 0) continue;
      const input: PackInput = { ...inst, dpCellCeiling: ceiling, maxConsecutiveSkips: 5 };
      const ref = pack({ ...input, adr0069Only: true });
      const out = pack(input);
      noSearch.push(pack({ ...input, searchNodeLimit: 0 }).total_score / opt);
      if (out.total_score < ref.total_score - 1e-9) belowReference++;
      adr.push(ref.total_score / opt);
      ours.push(out.total_score / opt);
    }
    rows.push({ dp_cell_ceiling: ceiling, algorithm: 'adr0069', ...summarize(adr) });
    rows.push({ dp_cell_ceiling: ceiling, algorithm: 'ours_without_search', ...summarize(noSearch) });
    rows.push({ dp_cell_ceiling: ceiling, algorithm: 'ours', ...summarize(ours) });
  }
  return { rows, below_reference: belowReference };
}
