/** Constant-time bearer-token lookup: no early exit, so timing reveals neither whether nor where a token matched. */
import { timingSafeEqual } from 'node:crypto';
import { type TokenGrant, tokenDigest } from './token-file.js';

/** The grant whose token is `presented` (digests are unique: at most one), or undefined. */
export function findGrant(grants: readonly TokenGrant[], presented: string): TokenGrant | undefined {
  // Same length for timingSafeEqual, and the token's length stays out of the timing.
  const digest = tokenDigest(presented);
  let match: TokenGrant | undefined;
  for (const grant of grants) {
    const equal = timingSafeEqual(digest, grant.digest);
    match = equal ? grant : match;
  }
  return match;
}
