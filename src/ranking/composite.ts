/** The `composite_v1` score (contract.md §7): weighted relevance ** exponent, recency, usefulness, confidence, frequency. */
import type { Weights } from '../config/ranking-settings.js';

export { DEFAULT_RELEVANCE_EXPONENT, DEFAULT_WEIGHTS, type Weights } from '../config/ranking-settings.js';

export const HALF_LIFE_DAYS: Readonly<Record<string, number>> = Object.freeze({
  factual: 180,
  procedural: 120,
  preference: 45,
  behavioral: 30,
  episodic: 14,
  unknown: 14,
});

const DAY_MS = 86_400_000;

/** Several labels: the shortest half-life; none known: 14 days (`unknown`). */
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

/** exp(−ln 2 · age_days / half_life); a future date counts as now, an unknown one as 0. */
export function recency(category: string, createdAtMs: number | undefined, nowMs: number): number {
  if (createdAtMs === undefined || !Number.isFinite(createdAtMs)) return 0;
  const ageDays = Math.max(0, nowMs - createdAtMs) / DAY_MS;
  return Math.exp((-Math.LN2 * ageDays) / halfLifeDays(category));
}

export function frequency(inclusions: number): number {
  return Math.min(1, Math.max(0, inclusions) / 10);
}

export interface CompositeInputs {
  relevance: number;
  recency: number;
  usefulness: number;
  confidence: number;
  frequency: number;
}

export function compositeScore(x: CompositeInputs, w: Weights): number {
  return (
    w.relevance * x.relevance +
    w.recency * x.recency +
    w.usefulness * x.usefulness +
    w.confidence * x.confidence +
    w.frequency * x.frequency
  );
}

/** AssemblyOptions fields 3–6; all 0 = not set. */
export interface RequestWeights {
  recency: number;
  relevance: number;
  usefulness: number;
  confidence: number;
}

/** Defaults, or the request's four weights with the default w_freq, normalised to sum 1 (contract.md §7). */
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
