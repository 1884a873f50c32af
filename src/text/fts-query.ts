/**
 * Both sides of the embedded store's FTS5 text handling (contract.md §4.3): what is indexed for a memory
 * ({@link toFtsText}) and the MATCH expression built from a user's query ({@link toFtsQuery}).
 *
 * Text without spaces. `unicode61` makes one token of a whole run of letters, so a Chinese
 * sentence, a Japanese phrase, a Korean word with its particle, or `部署脚本build` glued to an ASCII word
 * would each be a single token that no query word equals. Runs of scripts written without spaces (Han,
 * Kana, Hangul, Thai, Lao, Khmer, Myanmar) are therefore indexed as overlapping bigrams plus their last
 * character, separated by spaces from anything glued to them (`部署脚本build-kit运行` → `部署 署脚 脚本 本
 * build-kit 运行 行`), and a query's run becomes the same bigrams (`绿茶` → `"绿茶"`) or, for one
 * character, a prefix (`"茶"*`: every position of a run starts a bigram or is its last character).
 * Text without such scripts is indexed unchanged, so English tokens, BM25 statistics and ranking are
 * exactly what they were. One index, one BM25: CJK and English terms of a mixed query rank together.
 *
 * User text may hold FTS5 syntax (`"`, `*`, `^`, `NEAR(`, `OR`, `:`, parentheses), emoji or lone
 * surrogates. Rather than escaping that grammar we never pass it through: we keep only runs of letters,
 * digits and combining marks (all of which `unicode61` treats as token characters), wrap each term in
 * double quotes so FTS5 reads it as a plain string (so `NEAR`/`OR`/`AND` lose their operator meaning),
 * and join them with OR so that BM25 ranks documents by how many and how rare the terms are. Terms cannot
 * contain `"`, so quoting needs no escaping; the only syntax emitted is `OR` and the one-character prefix
 * `*` we add ourselves.
 */

const TOKEN_RE = /[\p{L}\p{N}\p{M}]+/gu;

/** Scripts written without spaces between words (plus the Kana length mark and the Han iteration mark). */
const UNSPACED =
  '\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}\\p{Script=Thai}' +
  '\\p{Script=Lao}\\p{Script=Khmer}\\p{Script=Myanmar}\\u30fc\\u3005';
const HAS_UNSPACED_RE = new RegExp(`[${UNSPACED}]`, 'u');
const UNSPACED_RUN_RE = new RegExp(`[${UNSPACED}]+`, 'gu');
/** Splits one query token into unspaced runs and the rest (`部署build` → `部署`, `build`). */
const PART_RE = new RegExp(`[${UNSPACED}]+|[^${UNSPACED}]+`, 'gu');

/**
 * Most distinct terms kept from one query. BM25 over an OR of terms costs about linearly in the terms'
 * matches: on LoCoMo turns, 32 unfiltered terms took 5.6 ms a search, 12 content terms 1.0 ms and 8
 * content terms 0.6 ms (a chat turn rarely has more than 8 content words).
 */
export const MAX_FTS_TERMS = 8;
/** Most bigram terms kept from a query's unspaced runs: bigrams are rare terms, cheap to intersect. */
export const MAX_BIGRAM_TERMS = 16;

/**
 * Common English function words: they match most rows of an agent, cost the most to rank and move BM25
 * the least. Dropped unless nothing else is left.
 */
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

/**
 * A term worth searching for: not a stopword, and not a one- or two-letter ASCII word. Shared with the
 * PostgreSQL store's query builder (postgres/search-text.ts), so both stores search for the same terms.
 */
export function isContentTerm(term: string): boolean {
  return !STOPWORDS.has(term) && !(term.length < 3 && /^[a-z]+$/.test(term));
}

/** `ab` → `ab b`, `abc` → `ab bc c`, `a` → `a` (code points, not UTF-16 units). */
function bigramText(run: string): string {
  const chars = Array.from(run);
  if (chars.length === 1) return run;
  let out = '';
  for (let i = 0; i + 1 < chars.length; i++) out += `${chars[i]}${chars[i + 1]} `;
  return out + chars[chars.length - 1];
}

/**
 * The text FTS5 indexes for a memory's content: the content itself when it has no unspaced script (the
 * common case costs one regex test), else with each unspaced run replaced by its bigrams (module TSDoc).
 * Deterministic: the store's triggers call it on insert and the migration re-indexes with it.
 * @param content memory content, any text.
 */
export function toFtsText(content: string): string {
  if (!HAS_UNSPACED_RE.test(content)) return content;
  return content.replace(UNSPACED_RUN_RE, (run) => ` ${bigramText(run)} `);
}

/**
 * @param text raw query text, any content.
 * @returns e.g. `"caroline" OR "绿茶" OR "茶"*`, or `null` when the text has no searchable term (the
 *   caller then returns no hits without running SQL). Never throws.
 */
export function toFtsQuery(text: string, maxTerms = MAX_FTS_TERMS): string | null {
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
      // Lower-case to dedupe and to match the stopword list: unicode61 folds case itself.
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
  return [...seen, ...bigrams].join(' OR ');
}
