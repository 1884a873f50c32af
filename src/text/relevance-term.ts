/**
 * The composite score's relevance term (contract.md §7), shared by the ranking on the main thread and the
 * CPU stage's lexical relevance so both raise relevance the same way.
 */

/**
 * `relevance ** exponent`: with an exponent above 1 a weak match adds less than its share.
 * @param relevance in [0, 1].
 * @param exponent ≥ 1 (`IBEX_CONTEXT_RELEVANCE_EXPONENT`); absent = 1.
 * @returns the term in [0, 1].
 */
export function relevanceTerm(relevance: number, exponent = 1): number {
  return relevance ** exponent;
}
