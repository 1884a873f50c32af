/**
 * Exact wrapped-block costs (contract.md §6) with a bounded per-memory LRU (one per pool worker). Both
 * encodings' pre-tokenizers split right after the nonce's closing `"` and after a block's `>\n`, so a
 * block costs count(head with this nonce) + count(rest with its `\n` joiner): the head is counted once
 * per nonce, the rest cached by memory id + content hash. The last joiner over-counts by ≤ 1 token (safe).
 */
import { createHash } from 'node:crypto';
import { dateAttribute, safetySentence } from '../format/formatter.js';
import { type BpeKind, bpeCount } from '../text/bpe.js';
import { escapeAttr, escapeBody } from '../text/escape.js';

/** Default number of cached per-memory counts (~100 bytes each plus the key). */
export const DEFAULT_BLOCK_CACHE_ENTRIES = 8192;

let capacity = DEFAULT_BLOCK_CACHE_ENTRIES;
const cache = new Map<string, number>();
let hits = 0;
let misses = 0;
let lastHead = { nonce: '', kind: '' as BpeKind | '', tokens: 0 };

/** Sets the cache's bound (0 disables caching) and empties it. @throws RangeError for a bad bound. */
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

function headTokens(nonce: string, kind: BpeKind): number {
  if (lastHead.nonce !== nonce || lastHead.kind !== kind) {
    lastHead = { nonce, kind, tokens: bpeCount(`<ibex_memory nonce="${nonce}"`, kind) };
  }
  return lastHead.tokens;
}

function restTokens(
  memory: { memory_id: string; category: string; content: string; date?: string },
  kind: BpeKind,
): number {
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

/** Exact tokens of one memory's wrapped block + `\n` joiner; without `nonce` the head is bounded by bytes. */
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
 * Formatter overhead (contract.md §6), the random nonce charged its bytes; each of the `joins` section joins
 * costs one extra token, since a join can merge with a neighbouring section's last characters.
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
