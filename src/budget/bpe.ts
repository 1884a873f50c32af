/**
 * Exact token counts for the OpenAI encodings (SPEC §5, issue 12): `bpe_o200k_base` and `bpe_cl100k_base`
 * count what tiktoken returns, with `gpt-tokenizer` (its encodings ship in the package; nothing is
 * downloaded). Special-token text such as `<|endoftext|>` is counted as ordinary text: memory and history
 * are untrusted, so they must neither be refused nor turn into one control token.
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

interface Encoding {
  countTokens(text: string, options: { allowedSpecial: Set<string>; disallowedSpecial: Set<string> }): number;
}

// Empty sets on both sides: no special token is recognised, none is refused (plain text, as tiktoken's
// `encode_ordinary`).
const ORDINARY = { allowedSpecial: new Set<string>(), disallowedSpecial: new Set<string>() };
const loaded = new Map<BpeKind, Encoding>();
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
 * Cost is linear in the text (tens of ns per character), so it belongs in the pool (SPEC §1).
 */
export function bpeCount(text: string, kind: BpeKind): number {
  if (text.length === 0) return 0;
  return encoding(kind).countTokens(text, ORDINARY);
}

/** Loads `kinds`' encodings now (start-up of a pool worker), so no request pays for it. */
export function warmBpe(kinds: readonly BpeKind[] = BPE_KINDS): void {
  for (const kind of kinds) bpeCount('warm up', kind);
}
