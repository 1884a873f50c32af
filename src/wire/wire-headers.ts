/** Response metadata keys (contract.md §2); no imports, so clients can use them without the server. */

export const LEVEL_HEADER = 'x-ibex-context-level';
/** `true` iff the level is not L0. */
export const DEGRADED_HEADER = 'x-ibex-context-degraded';
