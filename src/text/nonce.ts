/**
 * Per-assembly nonce (contract.md §9): unpadded base64url of `bytes` bytes from a cryptographic source.
 */
import { randomFillSync } from 'node:crypto';

/**
 * Random bytes drawn from the CSPRNG in one call and handed out once each: every draw costs
 * OpenSSL a `getpid()` fork check, a ~7 µs syscall on this 2-core VM, once per assembly before.
 */
const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let used = POOL_BYTES;

/** New nonce; 16 bytes → 22 characters. Bytes come from a pool refilled from the CSPRNG, never reused. */
export function generateNonce(bytes: number): string {
  if (bytes > POOL_BYTES) return randomFillSync(Buffer.alloc(bytes)).toString('base64url');
  if (used + bytes > POOL_BYTES) {
    randomFillSync(pool);
    used = 0;
  }
  const nonce = pool.toString('base64url', used, used + bytes);
  used += bytes;
  return nonce;
}

/** Length in characters of a nonce of `bytes` bytes: floor((4n+2)/3) (contract.md §6). */
export function nonceLength(bytes: number): number {
  return Math.floor((4 * bytes + 2) / 3);
}
