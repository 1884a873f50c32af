/**
 * Scoring and candidate settings (contract.md §7): which score schema runs, the relevance floor, the default
 * composite weights and how many cold candidates the project's stores are asked for at most.
 */
import { z } from 'zod';
import { Errors } from '../wire/errors.js';

/**
 * Power the composite raises relevance to (IBEX_CONTEXT_RELEVANCE_EXPONENT). The knapsack maximises a
 * sum, so with relevance = x / x_best (linear) two half-matches outweigh the best match; the chance that
 * a hit is what the question needs falls much faster with its search score than linearly. Raised to this
 * power, relevance decides which memories fill the budget and the other terms break ties among equally
 * relevant ones (docs/scoring.md has the sweep).
 */
export const DEFAULT_RELEVANCE_EXPONENT = 4;

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

/** Score schemas the service can run (contract.md §7). */
export type ScoreSchema = 'interim_v1' | 'composite_v1';

/** Validated ranking settings. */
export interface RankingSettings {
  /** IBEX_CONTEXT_SCORE_SCHEMA, default `composite_v1`. */
  scoreSchema: ScoreSchema;
  /**
   * IBEX_CONTEXT_RELEVANCE_FLOOR in [0, 0.5), default {@link DEFAULT_RELEVANCE_FLOOR}: below it a candidate
   * is `filter`; a budget with room for more than its candidates is held to down to a third of it
   * (ranking/candidate-limit.ts).
   */
  relevanceFloor: number;
  /**
   * IBEX_CONTEXT_RELEVANCE_EXPONENT, 1..8, default {@link DEFAULT_RELEVANCE_EXPONENT}: the composite values
   * a candidate by relevance raised to this power (composite-rank.ts), the floor compares the relevance
   * itself.
   */
  relevanceExponent: number;
  /** The composite's default weights (sum 1). */
  weights: Weights;
  /**
   * IBEX_CONTEXT_MAX_CANDIDATES, 10..5000, default {@link DEFAULT_MAX_CANDIDATES}: most cold hits the
   * embedded and PostgreSQL stores are asked for, whatever the budget (ranking/candidate-limit.ts).
   */
  maxCandidates: number;
  /**
   * IBEX_CONTEXT_NEIGHBOUR_HITS, 0..{@link MAX_NEIGHBOUR_HITS}, default {@link DEFAULT_NEIGHBOUR_HITS}: the
   * embedded and PostgreSQL stores' searches add the dialogue neighbours of this many best hits as
   * candidates (retrieval/neighbours.ts); 0 turns them off.
   */
  neighbourHits: number;
}

/**
 * Default of IBEX_CONTEXT_NEIGHBOUR_HITS: the memories just before and after the 5 best search hits. 3 to
 * 10 measured alike on LoCoMo (docs/scoring.md, "Dialogue neighbours"); each costs two index seeks.
 */
export const DEFAULT_NEIGHBOUR_HITS = 5;
/** Upper bound of IBEX_CONTEXT_NEIGHBOUR_HITS: the reads stay a bounded, small part of a search. */
export const MAX_NEIGHBOUR_HITS = 20;

/**
 * Default relevance floor (relevance = x / x_best of the call), for a budget the candidates fill several
 * times over. A budget with room for every candidate is held to a third of it (0.05; candidate-limit.ts
 * `planFor`): there the floor decides what is added, and the weak matches hold most of the evidence an
 * unlimited budget still lacks (docs/scoring.md, "Candidate bound and floor").
 */
export const DEFAULT_RELEVANCE_FLOOR = 0.15;

/**
 * Default bound on cold candidates. The limit itself is sized to the budget (candidate-limit.ts): 4,000
 * tokens of chat turns ask for ~200, 12,000 for ~600; only a larger budget (or none, sized by the context
 * window) reaches this bound. Below ~500 hits a LoCoMo agent's search cuts evidence off, above 600 it adds
 * almost nothing (docs/scoring.md).
 */
export const DEFAULT_MAX_CANDIDATES = 600;

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
    relevanceFloor: parse(env, 'IBEX_CONTEXT_RELEVANCE_FLOOR', floorSchema, DEFAULT_RELEVANCE_FLOOR),
    relevanceExponent: parse(
      env,
      'IBEX_CONTEXT_RELEVANCE_EXPONENT',
      z
        .string()
        .regex(/^\d+(\.\d+)?$/, 'must be a number in [1, 8]')
        .transform(Number)
        .refine((v) => v >= 1 && v <= 8, 'must be a number in [1, 8]'),
      DEFAULT_RELEVANCE_EXPONENT,
    ),
    weights: DEFAULT_WEIGHTS,
    maxCandidates: parse(
      env,
      'IBEX_CONTEXT_MAX_CANDIDATES',
      z
        .string()
        .regex(/^\d+$/, 'must be an integer in 10..5000')
        .transform(Number)
        .refine((v) => v >= 10 && v <= 5000, 'must be an integer in 10..5000'),
      DEFAULT_MAX_CANDIDATES,
    ),
    neighbourHits: parse(
      env,
      'IBEX_CONTEXT_NEIGHBOUR_HITS',
      z
        .string()
        .regex(/^\d+$/, `must be an integer in 0..${MAX_NEIGHBOUR_HITS}`)
        .transform(Number)
        .refine((v) => v <= MAX_NEIGHBOUR_HITS, `must be an integer in 0..${MAX_NEIGHBOUR_HITS}`),
      DEFAULT_NEIGHBOUR_HITS,
    ),
  };
}
