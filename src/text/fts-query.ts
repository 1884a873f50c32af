/** The embedded store's FTS5 text and MATCH expressions (contract.md §4.3); design in docs/design/text.md. */

const TOKEN_RE = /[\p{L}\p{N}\p{M}]+/gu;

const UNSPACED =
  '\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}\\p{Script=Thai}' +
  '\\p{Script=Lao}\\p{Script=Khmer}\\p{Script=Myanmar}\\u30fc\\u3005';
const HAS_UNSPACED_RE = new RegExp(`[${UNSPACED}]`, 'u');
const UNSPACED_RUN_RE = new RegExp(`[${UNSPACED}]+`, 'gu');
const PART_RE = new RegExp(`[${UNSPACED}]+|[^${UNSPACED}]+`, 'gu');

export const MAX_FTS_TERMS = 8;
export const MAX_BIGRAM_TERMS = 16;

/** They match most rows, cost the most to rank and move BM25 the least. */
const STOPWORDS = new Set(
  (
    'a about after all also am an and any are as at be because been before being but by can could did do ' +
    'does doing dont for from get got had has have having he her here hers him his how i if im in into is ' +
    'it its just let me more most my no nor not now of off oh ok okay on once only or other our ours out ' +
    'over own so some such than that thats the their theirs them then there these they this those through ' +
    'to too under until up very was we well were what when where which while who whom why will with would ' +
    'yeah yes you your yours'
  ).split(' '),
);

/** Not a stopword nor a one- or two-letter ASCII word; postgres/search-text.ts uses the same rule. */
export function isContentTerm(term: string): boolean {
  return !STOPWORDS.has(term) && !(term.length < 3 && /^[a-z]+$/.test(term));
}

function bigramText(run: string): string {
  const chars = Array.from(run);
  if (chars.length === 1) return run;
  let out = '';
  for (let i = 0; i + 1 < chars.length; i++) out += `${chars[i]}${chars[i + 1]} `;
  return out + chars[chars.length - 1];
}

/** The text FTS5 indexes for a memory; deterministic, as triggers and the migration both call it. */
export function toFtsText(content: string): string {
  if (!HAS_UNSPACED_RE.test(content)) return content;
  return content.replace(UNSPACED_RUN_RE, (run) => ` ${bigramText(run)} `);
}

/**
 * @returns e.g. `"caroline" OR "绿茶" OR "茶"*`, or `null` when nothing is searchable (the caller then
 *   runs no SQL). Never throws.
 */
export function toFtsQuery(text: string, maxTerms = MAX_FTS_TERMS): string | null {
  const terms = toFtsTerms(text, maxTerms);
  return terms === null ? null : terms.join(' OR ');
}

/**
 * The terms of {@link toFtsQuery}, each a MATCH expression of its own (`"caroline"`, `"茶"*`), in query
 * order; `null` when nothing is searchable. Never throws.
 */
export function toFtsTerms(text: string, maxTerms = MAX_FTS_TERMS): string[] | null {
  let seen = new Set<string>();
  const fallback = new Set<string>();
  const bigrams = new Set<string>();
  const unspaced = HAS_UNSPACED_RE.test(text);
  for (const match of text.matchAll(TOKEN_RE)) {
    const token = match[0];
    const parts = unspaced && HAS_UNSPACED_RE.test(token) ? token.match(PART_RE)! : [token];
    for (const part of parts) {
      if (HAS_UNSPACED_RE.test(part)) {
        const chars = Array.from(part);
        if (chars.length === 1) bigrams.add(`"${part}"*`);
        for (let i = 0; i + 1 < chars.length && bigrams.size < MAX_BIGRAM_TERMS; i++) {
          bigrams.add(`"${chars[i]}${chars[i + 1]}"`);
        }
        continue;
      }
      const term = part.toLowerCase();
      if (isContentTerm(term)) {
        if (seen.size < maxTerms) seen.add(`"${term}"`);
      } else if (fallback.size < maxTerms) {
        fallback.add(`"${term}"`);
      }
    }
    if (seen.size >= maxTerms && (!unspaced || bigrams.size >= MAX_BIGRAM_TERMS)) break;
  }
  if (seen.size === 0 && bigrams.size === 0) seen = fallback;
  if (seen.size === 0 && bigrams.size === 0) return null;
  return [...seen, ...bigrams];
}
