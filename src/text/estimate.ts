/** Token estimation on code points (contract.md §5, ADR-0067), and dispatch to exact `bpe_*` counts. */
import { Errors } from '../wire/errors.js';
import { type BpeKind, bpeCount, isBpeKind } from './bpe.js';

export type EstimateKind = 'chars_div_4' | 'runes_div_3_5' | BpeKind;

/** Code points of `text`; a lone surrogate counts as one (as Python's `len`). */
export function codePointLength(text: string): number {
  if (!SURROGATE.test(text)) return text.length;
  const n = text.length;
  let pairs = 0;
  if ((text as WellFormedCheck).isWellFormed()) {
    // No lone surrogate: skip each pair's low half unread.
    for (let i = 0; i < n; i++) {
      if ((text.charCodeAt(i) & 0xfc00) === 0xd800) {
        pairs++;
        i++;
      }
    }
    return n - pairs;
  }
  for (let i = 0; i < n; i++) {
    if ((text.charCodeAt(i) - 0xd800) >>> 0 < 0x400 && i + 1 < n) {
      if ((text.charCodeAt(i + 1) - 0xdc00) >>> 0 < 0x400) {
        pairs++;
        i++;
      }
    }
  }
  return n - pairs;
}

type WellFormedCheck = string & { isWellFormed(): boolean };

const SURROGATE = /[\uD800-\uDFFF]/;

/** ceil(L/4) or floor((2L+6)/7), 0 for L = 0; both subadditive, which the budget invariant relies on. */
export function estimateFromLength(length: number, kind: EstimateKind): number {
  if (isBpeKind(kind)) throw new TypeError(`estimateFromLength: ${kind} counts text, not a length`);
  if (length <= 0) return 0;
  return kind === 'chars_div_4' ? Math.ceil(length / 4) : Math.floor((2 * length + 6) / 7);
}

export function estimateTokens(text: string, kind: EstimateKind): number {
  if (isBpeKind(kind)) return bpeCount(text, kind);
  return estimateFromLength(codePointLength(text), kind);
}

export interface TokenCount {
  readonly tokens: number;
  readonly kind: EstimateKind;
}

export function countTokens(text: string, kind: EstimateKind): TokenCount {
  return { tokens: estimateTokens(text, kind), kind };
}

/** @throws IbexError `IBEX_ERR_ESTIMATE_KIND_MISMATCH` when kinds differ: never a silent sum (contract.md §5). */
export function addCounts(first: TokenCount, ...rest: TokenCount[]): TokenCount {
  let tokens = first.tokens;
  for (const c of rest) {
    if (c.kind !== first.kind) throw Errors.estimateKindMismatch(first.kind, c.kind);
    tokens += c.tokens;
  }
  return { tokens, kind: first.kind };
}
