/**
 * The authenticated caller of one call, handed from the authentication interceptor (which sees only
 * metadata) to the per-request authorization (which needs the decoded request). It is keyed by the
 * call's request Metadata object: grpc-js passes that same object through every server interceptor to
 * the handler (`call.metadata`, `ctx.metadata`), and a client cannot forge an entry in a WeakMap the way
 * it could forge a metadata header. Entries die with the call.
 */
import type { Metadata } from '@grpc/grpc-js';

/** Who is calling, as established by a bearer token. */
export interface Caller {
  /** The token file entry's name; safe to log. */
  readonly name: string;
  /** Lower-case org ids the caller may act for, or `'*'` for every org. */
  readonly orgs: ReadonlySet<string> | '*';
}

const callers = new WeakMap<Metadata, Caller>();

/** Records `caller` as the authenticated caller of the call whose request metadata is `metadata`. */
export function attachCaller(metadata: Metadata, caller: Caller): void {
  callers.set(metadata, caller);
}

/** The caller attached to `metadata`, or undefined when the call was not token-authenticated. */
export function callerOf(metadata: Metadata): Caller | undefined {
  return callers.get(metadata);
}

/** True when `caller` may act for `orgId` (canonical lower-case UUID). */
export function mayActFor(caller: Caller, orgId: string): boolean {
  return caller.orgs === '*' || caller.orgs.has(orgId);
}
