/** contract.md §3 timeout text: ms, or text with suffix `ms` or `s` (none = ms), case-insensitive; finite and > 0. */
import { z } from 'zod';

const TIMEOUT_TEXT = /^([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*(ms|s)?$/;

/** @throws Error with a short reason for `"45m"`, `""`, `"0"`, `"-5"`, `"nan"` and the like. */
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

export const timeoutMsSchema = z.union([z.string(), z.number()]).transform((value, ctx) => {
  try {
    return parseTimeoutMs(value);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});
