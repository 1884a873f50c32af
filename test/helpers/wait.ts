/** Polling helpers for tests that wait on something another connection or process does. */

/**
 * Polls `check` every 20 ms until it holds or `ms` milliseconds have passed; then checks once more.
 * Resolves to whether it held (never rejects on a timeout: the caller's `expect` says what was awaited).
 */
export async function waitFor(check: () => Promise<boolean> | boolean, ms = 3000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}
