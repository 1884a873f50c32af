/**
 * Per-request authorization, run by the AssembleContext handler right after contract.md §11
 * validation, because both checks need the decoded request: a token-authenticated caller may act only
 * for its orgs, and a `principal_context`, when present, must name the request's own org and agent.
 */

import { callerOf, mayActFor } from '../auth/caller.js';
import { Errors } from '../wire/errors.js';
import type { CallContext } from './call-context.js';
import type { ValidatedRequest } from './validate.js';

/**
 * Throws unless the call may proceed.
 *
 * 1. If {@link bearerAuthInterceptor} authenticated the call, its token must grant `req.orgId`.
 * 2. If the request carries `principal_context`, its `org_id` and `agent_id` (trimmed, any case) must
 *    equal the request's — also when no authentication is configured.
 *
 * Calls that were not token-authenticated (no tokens configured, or mTLS only) pass step 1.
 * @param ctx only `metadata` is read (the key the interceptor attached the caller to).
 * @throws IbexError `IBEX_ERR_PERMISSION_DENIED` (→ PERMISSION_DENIED) naming the mismatch.
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
 * Step 1 of {@link authorizeRequest} alone, for the calls that name an org and no principal
 * (SearchMemories, RecordMemoryFeedback): a token-authenticated caller may act only for its orgs.
 * @param orgId canonical lower-case UUID, validated.
 * @throws IbexError `IBEX_ERR_PERMISSION_DENIED` naming the caller and the org.
 */
export function authorizeOrg(orgId: string, ctx: Pick<CallContext, 'metadata'>): void {
  const caller = callerOf(ctx.metadata);
  if (caller !== undefined && !mayActFor(caller, orgId)) {
    throw Errors.permissionDenied(`caller '${caller.name}' may not act for org_id ${orgId}`);
  }
}
