/** What the transport calls for each AssembleContext request (assemble.ts builds it). */

import type { IbexError } from '../wire/errors.js';
import type { AssembleContextResponse, DegradationLevel } from '../wire/proto.js';
import type { CallContext } from './call-context.js';
import type { ValidatedRequest } from './validate.js';

/** What the injected pipeline returns for one assembly. */
export interface AssembleResult {
  response: AssembleContextResponse;
  /**
   * Degradation level; also sent as `x-ibex-context-level`. `x-ibex-context-degraded` is true when the
   * level is not L0 or `response.degradation.reasons` is not empty (a missing directive, contract.md §10).
   */
  level: DegradationLevel;
}

/**
 * The assembly pipeline (src/request/assemble.ts). It should honour `ctx.signal` and resolve before
 * `ctx.deadline`; dependency failures resolve with a degraded response, never reject (contract.md §11).
 * A rejection with an {@link IbexError} becomes that error's status; anything else becomes INTERNAL.
 */
export type AssembleFn = (req: ValidatedRequest, ctx: CallContext) => Promise<AssembleResult>;
