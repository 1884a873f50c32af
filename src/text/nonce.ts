import { randomFillSync } from 'node:crypto';

// Drawn in bulk because every CSPRNG call pays a fork check; see docs/design/text.md.
const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let used = POOL_BYTES;

/** 16 bytes → 22 characters; bytes are never reused. */
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

export function nonceLength(bytes: number): number {
  return Math.floor((4 * bytes + 2) / 3);
}
