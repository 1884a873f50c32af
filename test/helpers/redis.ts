/**
 * Redis availability rule for tests: tests that need Redis run against `REDIS_URL`
 * (default `redis://127.0.0.1:6379`). When it is unreachable they FAIL under `CI=true`, and are
 * skipped with a printed notice otherwise.
 */
import { createClient } from 'redis';
import { describe, it } from 'vitest';

/** URL the Redis tests use. */
export const REDIS_TEST_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';

/** One PING with a short connect timeout and no reconnects. */
export async function probeRedis(url = REDIS_TEST_URL, timeoutMs = 750): Promise<boolean> {
  const client = createClient({ url, socket: { connectTimeout: timeoutMs, reconnectStrategy: false } });
  client.on('error', () => {});
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    try {
      client.destroy();
    } catch {
      // never connected
    }
  }
}

/**
 * `describe` that applies the availability rule. `reachable` comes from an awaited {@link probeRedis}
 * (top-level await in the test file), because vitest collects suites synchronously.
 */
export function describeRedis(name: string, reachable: boolean, fn: () => void): void {
  if (reachable) {
    describe(name, fn);
    return;
  }
  if (process.env.CI === 'true') {
    describe(name, () => {
      it('needs a reachable Redis (CI=true)', () => {
        throw new Error(`Redis not reachable at ${REDIS_TEST_URL} — start it with: redis-server --port 6379`);
      });
    });
    return;
  }
  console.warn(`Redis not reachable at ${REDIS_TEST_URL} — start it with: redis-server --port 6379`);
  describe.skip(name, fn);
}
