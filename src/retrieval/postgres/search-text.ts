/**
 * Text preparation for the PostgreSQL store's full-text search (contract.md §4.3).
 *
 * PostgreSQL's default parser glues CJK text to neighbouring letters (`部署脚本build-kit运行` is one
 * word `部署脚本build` plus `kit运行`), so neither `脚本` nor `kit` would be found. Both sides therefore go
 * through the same preparation before `to_tsvector('simple', …)` / `websearch_to_tsquery('simple', …)`:
 * - a CJK run (Han, Hiragana, Katakana, Hangul) becomes its overlapping bigrams (`部署 署脚 脚本`; a
 *   one-character run stays itself), separated from the letters around it;
 * - a query's CJK run of up to 4 characters becomes a quoted phrase of its bigrams, so a word is found
 *   inside a longer run (its bigrams are adjacent there) and nowhere else; a longer run (a sentence
 *   typed without spaces) contributes its bigrams as separate terms.
 * Bigrams need no extension (pg_trgm is contrib and may be missing), and they are kept in the same
 * `tsvector` as the words, so one GIN index and one `ts_rank` cover both.
 *
 * User text is never syntax: a query keeps only runs of letters, digits and marks (no quote, minus or
 * parenthesis can survive), joined with `or`, which `websearch_to_tsquery` reads as OR and which can
 * never raise a syntax error.
 */
import { isContentTerm } from '../../text/fts-query.js';

const CJK = '\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}';
/** One CJK character (the scripts written without spaces). */
const CJK_RE = new RegExp(`[${CJK}]`, 'u');
/** Runs of CJK characters, or runs of other letters/digits/marks (CJK excluded, so `kit运行` splits). */
const RUN_RE = new RegExp(`[${CJK}]+|(?:(?![${CJK}])[\\p{L}\\p{N}\\p{M}])+`, 'gu');

/**
 * Most distinct terms kept from one query: ranking an OR costs about linearly in the terms'
 * matches, and a chat turn rarely has more than 8 content words (same bound as the embedded store).
 */
export const MAX_QUERY_TERMS = 8;

/** CJK query runs of up to 4 characters (3 bigrams) are searched as one phrase. */
const MAX_PHRASE_BIGRAMS = 3;

function bigrams(run: string): string[] {
  const chars = Array.from(run);
  if (chars.length < 2) return chars;
  const out: string[] = [];
  for (let i = 0; i + 1 < chars.length; i++) out.push(chars[i]! + chars[i + 1]!);
  return out;
}

/**
 * The text indexed for a memory: every letter/digit run as is, every CJK run as its bigrams.
 * @param content memory text, any content.
 * @returns space-separated words, e.g. `部署 署脚 脚本 build kit 运行`; never throws.
 */
export function indexText(content: string): string {
  const out: string[] = [];
  for (const m of content.matchAll(RUN_RE)) {
    const run = m[0];
    if (CJK_RE.test(run)) out.push(...bigrams(run));
    else out.push(run);
  }
  return out.join(' ');
}

/**
 * The `websearch_to_tsquery('simple', …)` text for a query: up to {@link MAX_QUERY_TERMS} distinct
 * lower-case terms joined with ` or ` (stopwords and one- or two-letter ASCII words only when nothing
 * else remains), CJK runs as quoted bigram phrases.
 * @param text raw query text, any content.
 * @returns e.g. `caroline or pottery or "部署 署脚"`, or `null` when the text has no searchable term
 *   (the caller then returns no hits without running SQL). Never throws.
 */
export function toWebSearchQuery(text: string, maxTerms = MAX_QUERY_TERMS): string | null {
  let kept = new Set<string>();
  const fallback = new Set<string>();
  for (const m of text.matchAll(RUN_RE)) {
    const term = m[0].toLowerCase();
    if (CJK_RE.test(term)) {
      const grams = bigrams(term);
      // A short run is a word: its bigrams must be adjacent. A long run is a sentence typed without
      // spaces: requiring it verbatim would find nothing, so its bigrams are terms of their own.
      if (grams.length === 1) kept.add(grams[0]!);
      else if (grams.length <= MAX_PHRASE_BIGRAMS) kept.add(`"${grams.join(' ')}"`);
      else for (const g of grams) if (kept.size < maxTerms) kept.add(g);
    } else if (isContentTerm(term)) {
      kept.add(term);
    } else if (fallback.size < maxTerms) {
      // `or` is websearch's operator: as a lone term it would be read as one, so quote fallbacks.
      fallback.add(`"${term}"`);
    }
    if (kept.size >= maxTerms) break;
  }
  if (kept.size === 0) kept = fallback;
  if (kept.size === 0) return null;
  return Array.from(kept).join(' or ');
}
