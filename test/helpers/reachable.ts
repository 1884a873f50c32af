/**
 * The availability rule of tests that need a server the suite does not start (PostgreSQL, Redis): run
 * when it is reachable; FAIL under `CI=true` when it is not; else skip with a printed notice.
 */
import { describe, it } from 'vitest';

/**
 * `describe` under the availability rule; `reachable` comes from an awaited probe (top-level await in the
 * test file), because vitest collects suites synchronously.
 * @param what the server's name (`PostgreSQL`); `notice` says where it was looked for and how to start it.
 */
export function describeIfReachable(
  name: string,
  reachable: boolean,
  { what, notice }: { what: string; notice: string },
  fn: () => void,
): void {
  if (reachable) {
    describe(name, fn);
    return;
  }
  if (process.env.CI === 'true') {
    describe(name, () => {
      it(`needs a reachable ${what} (CI=true)`, () => {
        throw new Error(notice);
      });
    });
    return;
  }
  console.warn(notice);
  describe.skip(name, fn);
}
