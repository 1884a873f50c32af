/**
 * Turns arbitrary user text into a safe FTS5 MATCH expression for the embedded store (SPEC §4.3).
 *
 * User text may hold FTS5 syntax (`"`, `*`, `^`, `NEAR(`, `OR`, `:`, parentheses), emoji or lone
 * surrogates. Rather than escaping that grammar we never pass it through: we keep only runs of letters,
 * digits and combining marks (all of which the `unicode61` tokenizer treats as token characters), wrap
 * each run in double quotes so FTS5 reads it as a plain string (so `NEAR`/`OR`/`AND` lose their operator
 * meaning), and join them with OR so that BM25 ranks documents by how many and how rare the terms are.
 * Runs cannot contain `"`, so quoting needs no escaping.
 */

const TOKEN_RE = /[\p{L}\p{N}\p{M}]+/gu;

/** Most distinct terms kept from one query; bounds the MATCH cost of an 8192-character query. */
export const MAX_FTS_TERMS = 32;

/**
 * @param text raw query text, any content.
 * @returns e.g. `"where" OR "did" OR "caroline"`, or `null` when the text has no searchable term
 *   (the caller then returns no hits without running SQL). Never throws.
 */
export function toFtsQuery(text: string, maxTerms = MAX_FTS_TERMS): string | null {
  const seen = new Set<string>();
  for (const match of text.matchAll(TOKEN_RE)) {
    // Lower-case only to dedupe: unicode61 folds case itself.
    seen.add(match[0].toLowerCase());
    if (seen.size >= maxTerms) break;
  }
  if (seen.size === 0) return null;
  let out = '';
  for (const term of seen) out += (out === '' ? '"' : ' OR "') + term + '"';
  return out;
}
