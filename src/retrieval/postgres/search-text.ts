/**
 * Text preparation for the PostgreSQL full-text search: CJK runs become bigrams on both sides, and
 * queries keep only letter/digit runs joined with `or`, so user text is never syntax (docs/scaling.md).
 */
import { isContentTerm } from '../../text/fts-query.js';

const CJK = '\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}';
const CJK_RE = new RegExp(`[${CJK}]`, 'u');
/** CJK runs, or runs of other letters/digits/marks (so `kit运行` splits). */
const RUN_RE = new RegExp(`[${CJK}]+|(?:(?![${CJK}])[\\p{L}\\p{N}\\p{M}])+`, 'gu');

/**
 * The text-search configuration of the index and of queries, created in the store's schema by migration 4:
 * English stemming (snowball) with no stop word list, as the embedded store's porter tokenizer stems and
 * keeps every word. Writes name it bare (their transaction's search_path is the schema); reads qualify it.
 */
export const SEARCH_CONFIG = 'stemmed';

/** {@link SEARCH_CONFIG} qualified by `schema` (a checked identifier), for statements outside its search_path. */
export function searchConfig(schema: string): string {
  return `${schema}.${SEARCH_CONFIG}`;
}

/** Same bound as the embedded store. */
export const MAX_QUERY_TERMS = 8;

const MAX_PHRASE_BIGRAMS = 3;

function bigrams(run: string): string[] {
  const chars = Array.from(run);
  if (chars.length < 2) return chars;
  const out: string[] = [];
  for (let i = 0; i + 1 < chars.length; i++) out.push(chars[i]! + chars[i + 1]!);
  return out;
}

/** Indexed text: letter/digit runs as they are, CJK runs as bigrams (`部署 署脚 脚本 build kit 运行`). */
export function indexText(content: string): string {
  const out: string[] = [];
  for (const m of content.matchAll(RUN_RE)) {
    const run = m[0];
    if (CJK_RE.test(run)) out.push(...bigrams(run));
    else out.push(run);
  }
  return out.join(' ');
}

/** `websearch_to_tsquery` text, e.g. `caroline or "部署 署脚"`, or `null` when nothing is searchable. */
export function toWebSearchQuery(text: string, maxTerms = MAX_QUERY_TERMS): string | null {
  let kept = new Set<string>();
  const fallback = new Set<string>();
  for (const m of text.matchAll(RUN_RE)) {
    const term = m[0].toLowerCase();
    if (CJK_RE.test(term)) {
      const grams = bigrams(term);
      // A short run is a word (adjacent bigrams); a long one is a sentence, so its bigrams stand alone.
      if (grams.length === 1) kept.add(grams[0]!);
      else if (grams.length <= MAX_PHRASE_BIGRAMS) kept.add(`"${grams.join(' ')}"`);
      else for (const g of grams) if (kept.size < maxTerms) kept.add(g);
    } else if (isContentTerm(term)) {
      kept.add(term);
    } else if (fallback.size < maxTerms) {
      // Quoted: a lone `or` would be read as websearch's operator.
      fallback.add(`"${term}"`);
    }
    if (kept.size >= maxTerms) break;
  }
  if (kept.size === 0) kept = fallback;
  if (kept.size === 0) return null;
  return Array.from(kept).join(' or ');
}
