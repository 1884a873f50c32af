/**
 * Redis availability rule for tests: tests that need Redis run against `REDIS_URL`
 * (default `redis://127.0.0.1:6379`). When it is unreachable they FAIL under `CI=true`, and are
 * skipped with a printed notice otherwise.
 */
import { createClient } from 'redis';
import { describeIfReachable } from './reachable.js';

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

/** `describe` under the availability rule ({@link describeIfReachable}) for Redis at {@link REDIS_TEST_URL}. */
export function describeRedis(name: string, reachable: boolean, fn: () => void): void {
  const notice = `Redis not reachable at ${REDIS_TEST_URL} — start it with: redis-server --port 6379`;
  describeIfReachable(name, reachable, { what: 'Redis', notice }, fn);
}
