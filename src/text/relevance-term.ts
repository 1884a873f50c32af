/** `relevance ** exponent` (contract.md §7), shared so ranking and the CPU stage raise relevance alike. */
export function relevanceTerm(relevance: number, exponent = 1): number {
  return relevance ** exponent;
}
