/** canonicalUuid: the 8-4-4-4-12 hex form in any case, lower-cased; anything else null. */
import { describe, expect, it } from 'vitest';
import { canonicalUuid, isUuid } from '../../src/util/uuid.js';

describe('canonicalUuid', () => {
  it('agrees with isUuid and lower-cases, returning a lower-case id as it is', () => {
    const inputs: unknown[] = [
      '00000000-0000-4000-8000-00000000000a',
      'ABCDEF01-2345-6789-ABCD-EF0123456789',
      'abcdef01-2345-6789-aBcD-ef0123456789',
      'abcdef01-2345-6789-abcd-ef012345678g',
      'abcdef01-2345-6789-abcd_ef0123456789',
      'abcdef0102345-6789-abcd-ef0123456789',
      'abcdef01-2345-6789-abcd-ef012345678',
      'abcdef01-2345-6789-abcd-ef01234567890',
      '{bcdef01-2345-6789-abcd-ef0123456789',
      'abcdef01-2345-6789-abcd-ef012345678`',
      'abcdef01-2345-6789-abcd-ef012345678G',
      '',
      42,
      null,
      undefined,
    ];
    for (const v of inputs) {
      expect(canonicalUuid(v)).toBe(isUuid(v) ? (v as string).toLowerCase() : null);
    }
  });
});
