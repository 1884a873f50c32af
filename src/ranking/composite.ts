/**
 * The memory-side composite (contract.md §7, score_schema `composite_v1`):
 * composite = w_rel·relevance + w_rec·recency + w_use·usefulness + w_conf·confidence + w_freq·frequency,
 * after the relevance floor; the relevance term is raised to a power (DEFAULT_RELEVANCE_EXPONENT). Pure;
 * float64.
 */
import type { Weights } from '../config/ranking-settings.js';

export { DEFAULT_RELEVANCE_EXPONENT, DEFAULT_WEIGHTS, type Weights } from '../config/ranking-settings.js';

/** Half-lives of recency by category, days (contract.md §7); anything else is `unknown`. */
export const HALF_LIFE_DAYS: Readonly<Record<string, number>> = Object.freeze({
  factual: 180,
  procedural: 120,
  preference: 45,
  behavioral: 30,
  episodic: 14,
  unknown: 14,
});

const DAY_MS = 86_400_000;

/**
 * Half-life of a category label, days: the label's, or for several labels (comma- or space-separated)
 * the shortest of theirs; 14 (`unknown`) when none is known.
 */
export function halfLifeDays(category: string): number {
  const direct = HALF_LIFE_DAYS[category];
  if (direct !== undefined) return direct;
  let best = Number.POSITIVE_INFINITY;
  for (const label of category.toLowerCase().split(/[\s,;|]+/)) {
    const h = HALF_LIFE_DAYS[label];
    if (h !== undefined && h < best) best = h;
  }
  return best === Number.POSITIVE_INFINITY ? HALF_LIFE_DAYS.unknown! : best;
}

/**
 * recency = exp(−ln 2 · age_days / half_life), in (0, 1]; a date in the future counts as now; an unknown
 * date (`undefined` or NaN) as 0.
 * @param createdAtMs the memory's creation, epoch ms.
 * @param nowMs now, epoch ms.
 */
export function recency(category: string, createdAtMs: number | undefined, nowMs: number): number {
  if (createdAtMs === undefined || !Number.isFinite(createdAtMs)) return 0;
  const ageDays = Math.max(0, nowMs - createdAtMs) / DAY_MS;
  return Math.exp((-Math.LN2 * ageDays) / halfLifeDays(category));
}

/** frequency = min(1, inclusions / 10). */
export function frequency(inclusions: number): number {
  return Math.min(1, Math.max(0, inclusions) / 10);
}

/** The composite's five inputs, each in [0, 1]. */
export interface CompositeInputs {
  relevance: number;
  recency: number;
  usefulness: number;
  confidence: number;
  frequency: number;
}

/** w·inputs (float64). */
export function compositeScore(x: CompositeInputs, w: Weights): number {
  return (
    w.relevance * x.relevance +
    w.recency * x.recency +
    w.usefulness * x.usefulness +
    w.confidence * x.confidence +
    w.frequency * x.frequency
  );
}

/** Per-request weights as they arrive (AssemblyOptions fields 3–6); all 0 = not set. */
export interface RequestWeights {
  recency: number;
  relevance: number;
  usefulness: number;
  confidence: number;
}

/**
 * The weights one call runs with: the defaults when no per-request weight is set; otherwise the four
 * given ones replace w_rec, w_rel, w_use, w_conf, w_freq keeps its default, and all five are normalised to
 * sum 1 (contract.md §7). The request's values are already checked (finite, ≥ 0, not all zero: validate.ts).
 */
export function effectiveWeights(defaults: Weights, request: RequestWeights | null): Weights {
  if (request === null) return defaults;
  const sum =
    request.recency + request.relevance + request.usefulness + request.confidence + defaults.frequency;
  return {
    relevance: request.relevance / sum,
    recency: request.recency / sum,
    usefulness: request.usefulness / sum,
    confidence: request.confidence / sum,
    frequency: defaults.frequency / sum,
  };
}
