/**
 * Exact token counts for the OpenAI encodings (contract.md §5): `bpe_o200k_base` and `bpe_cl100k_base`
 * count what tiktoken returns, with `gpt-tokenizer` (its encodings ship in the package; nothing is
 * downloaded). Special-token text such as `<|endoftext|>` is counted as ordinary text: memory and history
 * are untrusted, so they must neither be refused nor turn into one control token.
 *
 * BPE on one pre-token chunk is quadratic in its length (32,768 identical letters take 1.6 s, 200,000 take
 * a minute), and memory and history text is untrusted. Text with a run of 128+ characters of one class
 * (letters, punctuation, whitespace, newlines/slashes) — the only way a chunk can exceed
 * {@link MAX_EXACT_CHUNK} characters — is split with the encoding's own pre-tokenizer and counted chunk by
 * chunk; a chunk longer than {@link MAX_EXACT_CHUNK} is counted in pieces of that many characters plus one
 * token per cut. That bounds the cost to O(length × MAX_EXACT_CHUNK). A piecewise count is a valid
 * tokenization of the chunk and BPE rarely beats it by more than the margin, so it is conservative in
 * practice (the byte length would be provably so but charges CJK text, one long chunk, 3× its tokens).
 * Ordinary text takes the fast path and is exact.
 *
 * An encoding is loaded on first use in each thread (about half a second and ~50 MB for o200k on a shared
 * machine), so processes that never count exactly pay nothing; {@link warmBpe} loads it ahead of traffic.
 */
import { createRequire } from 'node:module';

/** The exact-count estimate kinds. */
export const BPE_KINDS = ['bpe_o200k_base', 'bpe_cl100k_base'] as const;
/** One of {@link BPE_KINDS}. */
export type BpeKind = (typeof BPE_KINDS)[number];

/** True when `kind` is an exact-count kind. */
export function isBpeKind(kind: string): kind is BpeKind {
  return kind === 'bpe_o200k_base' || kind === 'bpe_cl100k_base';
}

/** Longest pre-token chunk counted exactly (characters); longer chunks are counted in pieces. */
export const MAX_EXACT_CHUNK = 256;
// A chunk is a word (optional prefix + letters/marks + contraction), a punctuation run (optional space +
// punctuation + newlines/slashes), digits (≤ 3) or whitespace; one longer than 256 holds a 128-run of a class.
const LONG_RUN = /[\p{L}\p{M}]{128}|[^\s\p{L}\p{N}]{128}|\s{128}|[\r\n/]{128}/u;

interface Encoding {
  countTokens(text: string, options: { allowedSpecial: Set<string>; disallowedSpecial: Set<string> }): number;
}

// Empty sets on both sides: no special token is recognised, none is refused (plain text, as tiktoken's
// `encode_ordinary`).
const ORDINARY = { allowedSpecial: new Set<string>(), disallowedSpecial: new Set<string>() };
const loaded = new Map<BpeKind, Encoding>();
let splitters: { CL100K_TOKEN_SPLIT_REGEX: RegExp; O200K_TOKEN_SPLIT_REGEX: RegExp } | undefined;
// The CommonJS build loads synchronously, so counting stays a plain function call.
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

/**
 * Exact token count of `text` under `kind`'s encoding; 0 for the empty text.
 * Cost is linear in the text (tens of ns per character), so it belongs in the pool (contract.md §1).
 */
export function bpeCount(text: string, kind: BpeKind): number {
  if (text.length === 0) return 0;
  if (text.length < 2 * MAX_EXACT_CHUNK || !LONG_RUN.test(text)) {
    return encoding(kind).countTokens(text, ORDINARY);
  }
  return chunkedCount(text, kind);
}

/** Chunk-by-chunk count, long chunks in pieces plus one token per cut (see the module comment). */
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

/** Loads `kinds`' encodings now (start-up of a pool worker), so no request pays for it. */
export function warmBpe(kinds: readonly BpeKind[] = BPE_KINDS): void {
  for (const kind of kinds) bpeCount('warm up', kind);
}
