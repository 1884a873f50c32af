/** Bearer-token authentication (docs/security.md): who is calling; what it may do is authorizeRequest's. */
import { type Metadata, ServerInterceptingCall, type ServerInterceptor } from '@grpc/grpc-js';
import type { Logger } from '../telemetry/logger.js';
import { Errors, toStatusObject } from '../wire/errors.js';
import { attachCaller } from './caller.js';
import type { TokenGrant } from './token-file.js';
import { findGrant } from './verify-token.js';

/** Details sent with UNAUTHENTICATED; stable so clients and tests can tell the cases apart. */
export const UNAUTHENTICATED_DETAILS = {
  missing: 'missing bearer token: send metadata "authorization: Bearer <token>"',
  malformed: 'malformed authorization metadata: expected exactly one "Bearer <token>"',
  // HTTP/2 would silently keep only the first of several.
  duplicate: 'more than one authorization header: send exactly one "Bearer <token>"',
  invalid: 'invalid bearer token',
} as const;

/** Health checks pass without a token, so probes need none; they reveal only SERVING / NOT_SERVING. */
const UNAUTHENTICATED_PREFIXES = ['/grpc.health.v1.Health/'] as const;

const BEARER = /^Bearer[ \t]+([^ \t]+)[ \t]*$/i;

type Verdict = { ok: true; grant: TokenGrant } | { ok: false; reason: keyof typeof UNAUTHENTICATED_DETAILS };

function verify(metadata: Metadata, grants: readonly TokenGrant[]): Verdict {
  const values = metadata.get('authorization');
  if (values.length === 0) return { ok: false, reason: 'missing' };
  if (values.length > 1) return { ok: false, reason: 'duplicate' };
  const match = values.length === 1 && typeof values[0] === 'string' ? BEARER.exec(values[0]) : null;
  if (match === null) return { ok: false, reason: 'malformed' };
  const grant = findGrant(grants, match[1]!);
  return grant === undefined ? { ok: false, reason: 'invalid' } : { ok: true, grant };
}

/**
 * Answers a call without a valid token UNAUTHENTICATED before its handler; strips `authorization` once checked.
 * @param grants from {@link loadTokenFile}, not empty. @param logger failures at warn, never the token.
 */
export function bearerAuthInterceptor(grants: readonly TokenGrant[], logger: Logger): ServerInterceptor {
  const log = logger.child({ component: 'auth' });
  return (method, call) => {
    if (UNAUTHENTICATED_PREFIXES.some((p) => method.path.startsWith(p))) {
      return new ServerInterceptingCall(call);
    }
    const intercepting: ServerInterceptingCall = new ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (metadata, nextMetadata) => {
            const verdict = verify(metadata, grants);
            if (!verdict.ok) {
              log.warn(
                { peer: call.getPeer(), method: method.path, reason: verdict.reason },
                'caller not authenticated',
              );
              intercepting.sendStatus(
                toStatusObject(Errors.unauthenticated(UNAUTHENTICATED_DETAILS[verdict.reason])),
              );
              return;
            }
            metadata.remove('authorization');
            attachCaller(metadata, { name: verdict.grant.name, orgs: verdict.grant.orgs });
            nextMetadata(metadata);
          },
        });
      },
    });
    return intercepting;
  };
}
