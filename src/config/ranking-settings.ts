/**
 * Scoring and candidate settings (SPEC §7): which score schema runs, the relevance floor, the default
 * composite weights and how many cold candidates the project's stores are asked for at most.
 */
import { z } from 'zod';
import { Errors } from '../wire/errors.js';

/** Composite weights; they sum to 1. */
export interface Weights {
  relevance: number;
  recency: number;
  usefulness: number;
  confidence: number;
  frequency: number;
}

/**
 * The project's default weights, chosen by evidence recall on LoCoMo (docs/scoring.md has the grid):
 * relevance carries the selection and recency breaks ties among equally relevant memories. Every weight
 * on a term that is the same for all candidates (usefulness without feedback, frequency) or unrelated to
 * the question (confidence) measured lower: the knapsack maximises a sum, so a constant per memory
 * favours many small memories over the relevant ones.
 */
export const DEFAULT_WEIGHTS: Readonly<Weights> = Object.freeze({
  relevance: 0.9,
  recency: 0.1,
  usefulness: 0,
  confidence: 0,
  frequency: 0,
});

/** Score schemas the service can run (SPEC §7). */
export type ScoreSchema = 'interim_v1' | 'composite_v1';

/** Validated ranking settings. */
export interface RankingSettings {
  /** IBEX_CONTEXT_SCORE_SCHEMA, default `composite_v1`. */
  scoreSchema: ScoreSchema;
  /** IBEX_CONTEXT_RELEVANCE_FLOOR in [0, 0.5), default 0.15: below it a candidate is `filter`. */
  relevanceFloor: number;
  /** The composite's default weights (sum 1). */
  weights: Weights;
  /**
   * IBEX_CONTEXT_MAX_CANDIDATES, 10..1000, default 200: most cold hits the embedded and PostgreSQL stores
   * are asked for, whatever the budget (ranking/candidate-limit.ts).
   */
  maxCandidates: number;
}

type Env = Record<string, string | undefined>;

function parse<T>(env: Env, name: string, schema: z.ZodType<T>, fallback: T): T {
  const value = env[name];
  if (value === undefined) return fallback;
  const result = schema.safeParse(value.trim());
  if (!result.success) throw Errors.config(name, result.error.issues[0]?.message ?? 'invalid value');
  return result.data;
}

const floorSchema = z
  .string()
  .regex(/^\d+(\.\d+)?$/, 'must be a number in [0, 0.5)')
  .transform(Number)
  .refine((v) => v < 0.5, 'must be below 0.5: a higher floor filters good matches');

/**
 * Reads the ranking settings.
 * @throws IbexError `IBEX_ERR_CONFIG` naming the variable (e.g. a relevance floor ≥ 0.5).
 */
export function loadRankingSettings(env: Env): RankingSettings {
  return {
    scoreSchema: parse(
      env,
      'IBEX_CONTEXT_SCORE_SCHEMA',
      z.enum(['interim_v1', 'composite_v1']),
      'composite_v1',
    ),
    relevanceFloor: parse(env, 'IBEX_CONTEXT_RELEVANCE_FLOOR', floorSchema, 0.15),
    weights: DEFAULT_WEIGHTS,
    maxCandidates: parse(
      env,
      'IBEX_CONTEXT_MAX_CANDIDATES',
      z
        .string()
        .regex(/^\d+$/, 'must be an integer in 10..1000')
        .transform(Number)
        .refine((v) => v >= 10 && v <= 1000, 'must be an integer in 10..1000'),
      200,
    ),
  };
}
