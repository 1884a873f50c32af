/** Per-request authorization, run right after §11 validation because it needs the decoded request. */

import { callerOf, mayActFor } from '../auth/caller.js';
import { Errors } from '../wire/errors.js';
import type { CallContext } from './call-context.js';
import type { ValidatedRequest } from './validate.js';

/**
 * Throws unless the call may proceed: a token-authenticated caller must be granted `req.orgId`, and a
 * `principal_context` must name the request's org and agent (trimmed, any case), even without auth.
 * @throws IbexError `IBEX_ERR_PERMISSION_DENIED` naming the mismatch.
 */
export function authorizeRequest(req: ValidatedRequest, ctx: Pick<CallContext, 'metadata'>): void {
  authorizeOrg(req.orgId, ctx);
  const principal = req.principal;
  if (principal !== undefined) {
    if (principal.orgId.trim().toLowerCase() !== req.orgId) {
      throw Errors.permissionDenied('principal_context.org_id does not match org_id');
    }
    if (principal.agentId.trim().toLowerCase() !== req.agentId) {
      throw Errors.permissionDenied('principal_context.agent_id does not match agent_id');
    }
  }
}

/**
 * The org check of {@link authorizeRequest} alone, for calls that name an org and no principal.
 * @throws IbexError `IBEX_ERR_PERMISSION_DENIED` naming the caller and the org.
 */
export function authorizeOrg(orgId: string, ctx: Pick<CallContext, 'metadata'>): void {
  const caller = callerOf(ctx.metadata);
  if (caller !== undefined && !mayActFor(caller, orgId)) {
    throw Errors.permissionDenied(`caller '${caller.name}' may not act for org_id ${orgId}`);
  }
}
