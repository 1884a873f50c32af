/**
 * Polling for a condition a test cannot be told about (a pool refilled, a statement ended on the server).
 */

/**
 * Checks `check` every `stepMs` until it holds or `ms` have passed, then once more.
 * @returns whether it held.
 */
export async function waitFor(
  check: () => Promise<boolean> | boolean,
  ms = 3000,
  stepMs = 20,
): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, stepMs));
  }
  return check();
}
