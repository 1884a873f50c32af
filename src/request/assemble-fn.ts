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
export interface AssembleFn {
  (req: ValidatedRequest, ctx: CallContext): Promise<AssembleResult>;
  /**
   * The answer for a call still unanswered when D's timer fires (a process the machine did not schedule in
   * time): directive (when read) + history, L2, reason `deadline`, built at once on the main thread. Null
   * when none may be built (the call left under 10 ms, its history went with a CPU task, unknown model);
   * the call is then DEADLINE_EXCEEDED. Absent: always DEADLINE_EXCEEDED.
   */
  atDeadline?(req: ValidatedRequest, ctx: CallContext): AssembleResult | null;
}
