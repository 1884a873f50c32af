/**
 * Per-assembly nonce (SPEC §9): unpadded base64url of `bytes` bytes from a cryptographic source.
 */
import { randomBytes } from 'node:crypto';

/** New nonce; 16 bytes → 22 characters. */
export function generateNonce(bytes: number): string {
  return randomBytes(bytes).toString('base64url');
}

/** Length in characters of a nonce of `bytes` bytes: floor((4n+2)/3) (SPEC §6). */
export function nonceLength(bytes: number): number {
  return Math.floor((4 * bytes + 2) / 3);
}
