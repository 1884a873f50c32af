/**
 * Response metadata keys of ContextAssemblyService (contract.md §2), in one place for the server that sets them
 * and the clients, metrics and benches that read them. No imports, so client tools can
 * use them without loading the server.
 */

/** Response metadata key carrying the degradation level, `L0` | `L1` | `L2` (contract.md §2). */
export const LEVEL_HEADER = 'x-ibex-context-level';
/** Response metadata key: `true` iff the level is not L0 (contract.md §2). */
export const DEGRADED_HEADER = 'x-ibex-context-degraded';
