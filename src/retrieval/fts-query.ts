/**
 * Turns arbitrary user text into a safe FTS5 MATCH expression for the embedded store (SPEC §4.3).
 *
 * User text may hold FTS5 syntax (`"`, `*`, `^`, `NEAR(`, `OR`, `:`, parentheses), emoji or lone
 * surrogates. Rather than escaping that grammar we never pass it through: we keep only runs of letters,
 * digits and combining marks (all of which the `unicode61` tokenizer treats as token characters), wrap
 * each run in double quotes so FTS5 reads it as a plain string (so `NEAR`/`OR`/`AND` lose their operator
 * meaning), and join them with OR so that BM25 ranks documents by how many and how rare the terms are.
 * Stopwords are left out when other terms remain (cost, see {@link MAX_FTS_TERMS}).
 * Runs cannot contain `"`, so quoting needs no escaping.
 */

const TOKEN_RE = /[\p{L}\p{N}\p{M}]+/gu;

/**
 * Most distinct terms kept from one query. BM25 over an OR of terms costs about linearly in the terms'
 * matches: on LoCoMo turns, 32 unfiltered terms took 5.6 ms a search, 12 content terms 1.0 ms and 8
 * content terms 0.6 ms (a chat turn rarely has more than 8 content words).
 */
export const MAX_FTS_TERMS = 8;

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

/** A term worth searching for: not a stopword, and not a one- or two-letter ASCII word. */
function isContentTerm(term: string): boolean {
  return !STOPWORDS.has(term) && !(term.length < 3 && /^[a-z]+$/.test(term));
}

/**
 * @param text raw query text, any content.
 * @returns e.g. `"where" OR "did" OR "caroline"`, or `null` when the text has no searchable term
 *   (the caller then returns no hits without running SQL). Never throws.
 */
export function toFtsQuery(text: string, maxTerms = MAX_FTS_TERMS): string | null {
  let seen = new Set<string>();
  const fallback = new Set<string>();
  for (const match of text.matchAll(TOKEN_RE)) {
    // Lower-case to dedupe and to match the stopword list: unicode61 folds case itself.
    const term = match[0].toLowerCase();
    if (isContentTerm(term)) {
      seen.add(term);
      if (seen.size >= maxTerms) break;
    } else if (fallback.size < maxTerms) {
      fallback.add(term);
    }
  }
  if (seen.size === 0) seen = fallback;
  if (seen.size === 0) return null;
  let out = '';
  for (const term of seen) out += (out === '' ? '"' : ' OR "') + term + '"';
  return out;
}
