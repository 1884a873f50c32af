/** Per-request weights (AssemblyOptions fields 3–6, contract.md §7), checked here. */
import { Errors } from '../wire/errors.js';
import type { RequestWeights } from './composite.js';

export type { RequestWeights } from './composite.js';

const FIELDS = ['recency_weight', 'relevance_weight', 'usefulness_weight', 'confidence_weight'] as const;

/**
 * @returns null when all are zero (the defaults run), else the weights.
 * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` naming a weight that is not finite or is negative.
 */
export function requestWeights(sent: readonly [number, number, number, number]): RequestWeights | null {
  for (let i = 0; i < 4; i++) {
    const v = sent[i]!;
    if (!Number.isFinite(v))
      throw Errors.invalidArgument(FIELDS[i]!, `${FIELDS[i]} must be finite, got ${v}`);
    if (v < 0) throw Errors.invalidArgument(FIELDS[i]!, `${FIELDS[i]} must be ≥ 0, got ${v}`);
  }
  // All zero is indistinguishable from "not set" on the wire (proto3 scalars).
  if (sent[0] === 0 && sent[1] === 0 && sent[2] === 0 && sent[3] === 0) return null;
  return { recency: sent[0], relevance: sent[1], usefulness: sent[2], confidence: sent[3] };
}
