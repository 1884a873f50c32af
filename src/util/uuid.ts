import { createHash } from 'node:crypto';

const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** True for the 8-4-4-4-12 hex form, any case, any version. */
export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && value.length === 36 && UUID_RE.test(value);
}

/** Canonical lower-case UUID, or `null`; no new string for an already lower-case id (three times per hit). */
export function canonicalUuid(value: unknown): string | null {
  if (typeof value !== 'string' || value.length !== 36) return null;
  let upper = false;
  for (let i = 0; i < 36; i++) {
    const c = value.charCodeAt(i);
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (c !== 0x2d) return null;
    } else if ((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66)) {
      // lower-case hex digit
    } else if (c >= 0x41 && c <= 0x46) upper = true;
    else return null;
  }
  return upper ? value.toLowerCase() : value;
}

/** Name-based UUID v5 (RFC 9562), lower-case, deterministic. @throws TypeError for a bad `namespace`. */
export function uuidV5(name: string, namespace: string): string {
  if (!isUuid(namespace)) throw new TypeError('uuidV5: namespace must be a UUID');
  const ns = Buffer.from(namespace.replaceAll('-', ''), 'hex');
  const bytes = createHash('sha1').update(ns).update(name, 'utf8').digest().subarray(0, 16);
  bytes[6] = (bytes[6]! & 0x0f) | 0x50;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
