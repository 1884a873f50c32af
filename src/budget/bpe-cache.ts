/**
 * Exact wrapped-block costs with a bounded per-memory cache (contract.md §5/§6).
 *
 * A block as the formatter writes it is `<ibex_memory nonce="N"` + ` id="I" category="C">\n` + body +
 * `\n</ibex_memory>`, and blocks are joined by `\n`. Both encodings' pre-tokenizers always split right
 * after the `"` that closes the nonce (a quote followed by a space ends a punctuation run) and right after
 * the `>\n` that ends a block (`<` starts a new word), so a block's count is exactly
 * count(head with this assembly's nonce) + count(rest with its joiner). The head is counted once per
 * nonce; the rest depends only on the memory, so it is cached by memory id + content hash (an LRU,
 * module-level: one per pool worker). Charging the joiner on every block over-counts the last one by at
 * most one token, which keeps the budget invariant on the safe side.
 */
import { createHash } from 'node:crypto';
import { dateAttribute, safetySentence } from '../format/formatter.js';
import { type BpeKind, bpeCount } from '../text/bpe.js';
import { escapeAttr, escapeBody } from '../text/escape.js';

/** Default number of cached per-memory counts (about 100 bytes each plus the key). */
export const DEFAULT_BLOCK_CACHE_ENTRIES = 8192;

let capacity = DEFAULT_BLOCK_CACHE_ENTRIES;
// A Map iterates in insertion order: re-inserting on a hit makes the first key the least recently used.
const cache = new Map<string, number>();
let hits = 0;
let misses = 0;
let lastHead = { nonce: '', kind: '' as BpeKind | '', tokens: 0 };

/**
 * Sets the cache's bound (entries ≥ 0; 0 disables caching) and empties it.
 * @throws RangeError for a negative or non-integer bound.
 */
export function configureBlockCache(entries: number): void {
  if (!Number.isInteger(entries) || entries < 0)
    throw new RangeError(`entries must be an integer ≥ 0, got ${entries}`);
  capacity = entries;
  cache.clear();
  hits = 0;
  misses = 0;
}

/** Cache counters since the last {@link configureBlockCache}: hits, misses and current size. */
export function blockCacheStats(): { hits: number; misses: number; size: number; capacity: number } {
  return { hits, misses, size: cache.size, capacity };
}

/** Tokens of `<ibex_memory nonce="NONCE"` (the nonce is base64url: nothing to escape). */
function headTokens(nonce: string, kind: BpeKind): number {
  if (lastHead.nonce !== nonce || lastHead.kind !== kind) {
    lastHead = { nonce, kind, tokens: bpeCount(`<ibex_memory nonce="${nonce}"`, kind) };
  }
  return lastHead.tokens;
}

/** Tokens of the nonce-independent rest of a block, with its `\n` joiner; cached. */
function restTokens(
  memory: { memory_id: string; category: string; content: string; date?: string },
  kind: BpeKind,
): number {
  // The hash covers everything the rest is made of except the id, which is part of the key as given.
  const hash = createHash('sha1')
    .update(memory.category)
    .update('\0')
    .update(memory.date ?? '')
    .update('\0')
    .update(memory.content)
    .digest('base64');
  const key = `${kind}\0${memory.memory_id}\0${hash}`;
  const cached = cache.get(key);
  if (cached !== undefined) {
    hits++;
    cache.delete(key);
    cache.set(key, cached);
    return cached;
  }
  misses++;
  const text =
    ` id="${escapeAttr(memory.memory_id)}" category="${escapeAttr(memory.category)}"${dateAttribute(memory.date)}>\n` +
    `${escapeBody(memory.content)}\n</ibex_memory>\n`;
  const tokens = bpeCount(text, kind);
  if (capacity > 0) {
    if (cache.size >= capacity) cache.delete(cache.keys().next().value as string);
    cache.set(key, tokens);
  }
  return tokens;
}

/**
 * Exact cost in tokens of one memory's wrapped block plus its joining `\n` (contract.md §6).
 * @param nonce this assembly's nonce text. Without it (cost computed before the nonce exists) the head is
 *   bounded instead: every token is at least one byte, so count(head) ≤ count(`<ibex_memory nonce`) +
 *   bytes(`="` + nonce + `"`) for a nonce of `nonceChars` ASCII characters.
 */
export function bpeWrappedBlockTokens(
  memory: { memory_id: string; category: string; content: string; date?: string },
  kind: BpeKind,
  nonce: string | undefined,
  nonceChars: number,
): number {
  const head =
    nonce !== undefined ? headTokens(nonce, kind) : bpeCount('<ibex_memory nonce', kind) + nonceChars + 3;
  return head + restTokens(memory, kind);
}

const MARK = '\u0001';
const [SENTENCE_BEFORE, SENTENCE_AFTER] = safetySentence(MARK).split(MARK) as [string, string];

/**
 * Formatter overhead (contract.md §6) counted exactly where it can be and bounded where it cannot: the nonce is
 * random, so `="NONCE">` is charged its byte length (every token is at least one byte; the pre-tokenizer
 * splits before `="` and after `">`, so the pieces add up). The representative nonce of contract.md §6 would
 * under-count here: `nnnn…` is a few tokens, a base64url nonce many more. Each section join (`\n\n`, and
 * the `\n` after the directive) is counted on its own plus one token, because a join can merge with the
 * neighbouring section's last characters into different tokens.
 * @param joins number of `\n\n` joins between sections (0..3).
 */
export function bpeFormatterOverheadTokens(
  hasDirective: boolean,
  nonceChars: number,
  joins: number,
  kind: BpeKind,
): number {
  let tokens = joins * (bpeCount('\n\n', kind) + 1);
  if (hasDirective) {
    tokens +=
      1 +
      bpeCount(`\n${SENTENCE_BEFORE.slice(0, -2)}`, kind) +
      nonceChars +
      4 +
      bpeCount(SENTENCE_AFTER.slice(2), kind);
  }
  return tokens;
}
