/** The authenticated caller, keyed by the call's Metadata object: unlike a header, a client cannot forge it. */
import type { Metadata } from '@grpc/grpc-js';

export interface Caller {
  readonly name: string;
  /** Lower-case org ids, or `'*'` for every org. */
  readonly orgs: ReadonlySet<string> | '*';
}

const callers = new WeakMap<Metadata, Caller>();

export function attachCaller(metadata: Metadata, caller: Caller): void {
  callers.set(metadata, caller);
}

/** The caller attached to `metadata`; undefined when not token-authenticated. */
export function callerOf(metadata: Metadata): Caller | undefined {
  return callers.get(metadata);
}

export function mayActFor(caller: Caller, orgId: string): boolean {
  return caller.orgs === '*' || caller.orgs.has(orgId);
}
