/** Scoring and candidate settings (contract.md §7); the defaults' evidence is in docs/scoring.md. */
import { z } from 'zod';
import { Errors } from '../wire/errors.js';

/** The knapsack maximises a sum: raised to this power, two half-matches no longer outweigh the best match. */
export const DEFAULT_RELEVANCE_EXPONENT = 4;

export interface Weights {
  relevance: number;
  recency: number;
  usefulness: number;
  confidence: number;
  frequency: number;
}

/** Chosen by evidence recall on LoCoMo: a constant term per memory favours many small memories over relevant ones. */
export const DEFAULT_WEIGHTS: Readonly<Weights> = Object.freeze({
  relevance: 0.9,
  recency: 0.1,
  usefulness: 0,
  confidence: 0,
  frequency: 0,
});

export type ScoreSchema = 'interim_v1' | 'composite_v1';

export interface RankingSettings {
  scoreSchema: ScoreSchema;
  relevanceFloor: number;
  relevanceExponent: number;
  weights: Weights;
  maxCandidates: number;
  neighbourHits: number;
}

/** Neighbours of the 5 best hits (docs/scoring.md, "Dialogue neighbours"). */
export const DEFAULT_NEIGHBOUR_HITS = 5;
/** Keeps the neighbour reads a bounded, small part of a search. */
export const MAX_NEIGHBOUR_HITS = 20;

/** For a budget the candidates fill several times over; it falls to 1 % of it for a budget that holds every candidate (candidate-limit.ts). */
export const DEFAULT_RELEVANCE_FLOOR = 0.15;

/** Only budgets past ~12,000 tokens reach this bound; beyond 600 hits evidence recall barely grows. */
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

/** @throws IbexError `IBEX_ERR_CONFIG` naming the variable. */
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
