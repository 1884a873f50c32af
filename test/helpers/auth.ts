/**
 * Auth test helpers: complete auth settings from the few a test sets, and the message of the coded error a
 * call must throw.
 */
import { expect } from 'vitest';
import type { AuthSettings } from '../../src/config/settings.js';
import { type IbexErrorCode, isIbexError } from '../../src/wire/errors.js';

/** Auth settings with nothing configured (plaintext, no tokens), overridden by `a`. */
export function authSettings(a: Partial<AuthSettings>): AuthSettings {
  return { tlsCert: '', tlsKey: '', tlsClientCa: '', tokensFile: '', allowInsecure: false, ...a };
}

/**
 * The message of the IbexError with `code` that `fn` throws; fails the test when `fn` throws anything
 * else or nothing.
 */
export function thrownMessage(code: IbexErrorCode, fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(isIbexError(err, code)).toBe(true);
    return (err as Error).message;
  }
  throw new Error(`expected ${code}`);
}
