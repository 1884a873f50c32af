/** Exact `bpe_*` token counts (contract.md §5); long chunks counted in pieces (docs/design/text.md). */
import { createRequire } from 'node:module';

export const BPE_KINDS = ['bpe_o200k_base', 'bpe_cl100k_base'] as const;
export type BpeKind = (typeof BPE_KINDS)[number];

export function isBpeKind(kind: string): kind is BpeKind {
  return kind === 'bpe_o200k_base' || kind === 'bpe_cl100k_base';
}

/** Longest pre-token chunk counted exactly (characters); longer chunks are counted in pieces. */
export const MAX_EXACT_CHUNK = 256;
const LONG_RUN = /[\p{L}\p{M}]{128}|[^\s\p{L}\p{N}]{128}|\s{128}|[\r\n/]{128}/u;

interface Encoding {
  countTokens(text: string, options: { allowedSpecial: Set<string>; disallowedSpecial: Set<string> }): number;
}

// No special token is recognised or refused, as tiktoken's `encode_ordinary`.
const ORDINARY = { allowedSpecial: new Set<string>(), disallowedSpecial: new Set<string>() };
const loaded = new Map<BpeKind, Encoding>();
let splitters: { CL100K_TOKEN_SPLIT_REGEX: RegExp; O200K_TOKEN_SPLIT_REGEX: RegExp } | undefined;
const requireCjs = createRequire(import.meta.url);

function encoding(kind: BpeKind): Encoding {
  let enc = loaded.get(kind);
  if (enc === undefined) {
    enc = requireCjs(
      kind === 'bpe_o200k_base' ? 'gpt-tokenizer/encoding/o200k_base' : 'gpt-tokenizer/encoding/cl100k_base',
    ) as Encoding;
    loaded.set(kind, enc);
  }
  return enc;
}

/** Exact token count; 0 for the empty text. Linear in the text, so it belongs in the pool (contract.md §1). */
export function bpeCount(text: string, kind: BpeKind): number {
  if (text.length === 0) return 0;
  if (text.length < 2 * MAX_EXACT_CHUNK || !LONG_RUN.test(text)) {
    return encoding(kind).countTokens(text, ORDINARY);
  }
  return chunkedCount(text, kind);
}

function chunkedCount(text: string, kind: BpeKind): number {
  splitters ??= requireCjs('gpt-tokenizer/encodingParams/constants') as NonNullable<typeof splitters>;
  const split = new RegExp(
    kind === 'bpe_o200k_base' ? splitters.O200K_TOKEN_SPLIT_REGEX : splitters.CL100K_TOKEN_SPLIT_REGEX,
  );
  const enc = encoding(kind);
  let tokens = 0;
  for (const match of text.matchAll(split)) {
    const chunk = match[0];
    if (chunk.length <= MAX_EXACT_CHUNK) {
      tokens += enc.countTokens(chunk, ORDINARY);
      continue;
    }
    for (let start = 0; start < chunk.length; ) {
      let end = Math.min(chunk.length, start + MAX_EXACT_CHUNK);
      // Never cut a surrogate pair.
      if (end < chunk.length && (chunk.charCodeAt(end - 1) & 0xfc00) === 0xd800) end--;
      tokens += enc.countTokens(chunk.slice(start, end), ORDINARY) + (end < chunk.length ? 1 : 0);
      start = end;
    }
  }
  return tokens;
}

export function warmBpe(kinds: readonly BpeKind[] = BPE_KINDS): void {
  for (const kind of kinds) bpeCount('warm up', kind);
}
