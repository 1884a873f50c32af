/**
 * contract.md §3 timeout text: a number (milliseconds) or text — trimmed, case-insensitive, suffix `ms`
 * (milliseconds) or `s` (seconds), no suffix = milliseconds; finite and > 0.
 */
import { z } from 'zod';

const TIMEOUT_TEXT = /^([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*(ms|s)?$/;

/**
 * Parses a timeout setting into milliseconds.
 * @param value a number of ms, or text such as `"45"`, `" 45 MS "`, `"0.05s"`, `"1S"`.
 * @returns milliseconds, finite and > 0.
 * @throws Error with a short reason for `"45m"`, `"45us"`, `""`, `"0"`, `"-5"`, `"nan"` and the like.
 */
export function parseTimeoutMs(value: string | number): number {
  let ms: number;
  if (typeof value === 'number') {
    ms = value;
  } else {
    const match = TIMEOUT_TEXT.exec(value.trim().toLowerCase());
    if (!match)
      throw new Error(`invalid timeout ${JSON.stringify(value)}: expected a number with optional ms or s`);
    const n = Number(match[1]);
    ms = match[2] === 's' ? n * 1000 : n;
  }
  if (!Number.isFinite(ms) || ms <= 0)
    throw new Error(`invalid timeout ${JSON.stringify(value)}: must be finite and > 0`);
  return ms;
}

/** zod schema of a timeout setting (string or number) → milliseconds. */
export const timeoutMsSchema = z.union([z.string(), z.number()]).transform((value, ctx) => {
  try {
    return parseTimeoutMs(value);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});
