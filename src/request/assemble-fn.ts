/** What the transport calls for each AssembleContext request (assemble.ts builds it). */

import type { IbexError } from '../wire/errors.js';
import type { AssembleContextResponse, DegradationLevel } from '../wire/proto.js';
import type { CallContext } from './call-context.js';
import type { ValidatedRequest } from './validate.js';

/** What the injected pipeline returns for one assembly. */
export interface AssembleResult {
  response: AssembleContextResponse;
  /** Degradation level, also sent as `x-ibex-context-level`. */
  level: DegradationLevel;
}

/**
 * The assembly pipeline: honours `ctx.signal`, resolves before `ctx.deadline`, and resolves dependency
 * failures as degraded responses. A rejection with an {@link IbexError} becomes its status, else INTERNAL.
 */
export type AssembleFn = (req: ValidatedRequest, ctx: CallContext) => Promise<AssembleResult>;
