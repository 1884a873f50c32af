/**
 * Constant-time bearer-token lookup: the presented token is hashed once, and its digest is
 * compared with every stored digest using `crypto.timingSafeEqual`, with no early exit, so the time
 * taken reveals neither whether nor where a token matched.
 */
import { timingSafeEqual } from 'node:crypto';
import { type TokenGrant, tokenDigest } from './token-file.js';

/**
 * Finds the grant whose token is `presented`.
 * @param grants from {@link loadTokenFile} (digests are unique, so at most one matches).
 * @returns the matching grant, or undefined.
 */
export function findGrant(grants: readonly TokenGrant[], presented: string): TokenGrant | undefined {
  // Hashing first gives every comparison the same length, which timingSafeEqual requires, and keeps the
  // token's length out of the timing.
  const digest = tokenDigest(presented);
  let match: TokenGrant | undefined;
  for (const grant of grants) {
    const equal = timingSafeEqual(digest, grant.digest);
    match = equal ? grant : match;
  }
  return match;
}
