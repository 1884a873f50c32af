/**
 * The watch that warms on agents an import adds to a running service (src/app/tenant-warmup.ts): it warms
 * when rows are added, gives way to real traffic, and ends. Fake timers drive its polling interval.
 */
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { NEW_TENANT_WATCH, TENANT_WARMUP, watchNewTenants } from '../../src/app/tenant-warmup.js';
import type { AssembleFn, AssembleResult } from '../../src/request/assemble-fn.js';
import { createLogger } from '../../src/telemetry/logger.js';

const TENANT = { orgId: 'org', agentId: 'agent', queries: ['what did caroline paint', 'camping trip'] };
const L0 = { response: {}, level: 'L0' } as unknown as AssembleResult;

function harness() {
  const state = { stamp: 1, served: 0, calls: 0, listings: 0, onCall: () => {} };
  const assemble = (async () => {
    state.calls++;
    state.onCall();
    return L0;
  }) as AssembleFn;
  const watch = watchNewTenants({
    assemble,
    sources: {
      warmTenants: async () => {
        state.listings++;
        return [TENANT];
      },
    },
    rowStamp: () => state.stamp,
    servedCalls: () => state.served,
    models: ['gpt-4o'],
    deadlineMs: 45,
    logger: createLogger({ logLevel: 'silent' }),
  });
  let ended = false;
  void watch.ended.then(() => {
    ended = true;
  });
  return { state, watch, ended: () => ended };
}

/** One polling interval, then the warm-up's promise chain (its stub calls resolve at once). */
async function interval(): Promise<void> {
  await vi.advanceTimersByTimeAsync(NEW_TENANT_WATCH.intervalMs);
  for (let i = 0; i < 5; i++) await vi.advanceTimersByTimeAsync(0);
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

it('does nothing while no rows are added', async () => {
  const h = harness();
  for (let i = 0; i < 6; i++) await interval();
  expect(h.state.listings).toBe(0);
  expect(h.state.calls).toBe(0);
  expect(h.ended()).toBe(false);
  await h.watch.stop();
  expect(h.ended()).toBe(true);
});

it('warms on the added agents once rows stop being added, then ends', async () => {
  const h = harness();
  await interval();
  h.state.stamp = 2;
  await interval();
  // Still being written: no warm-up yet.
  h.state.stamp = 3;
  await interval();
  expect(h.state.listings).toBe(0);
  await interval();
  expect(h.state.listings).toBe(1);
  expect(h.state.calls).toBe(TENANT_WARMUP.calls);
  expect(h.ended()).toBe(true);
  // Ended: more rows start nothing.
  h.state.stamp = 4;
  await interval();
  await interval();
  expect(h.state.listings).toBe(1);
});

it('ends at the first real call, stopping a warm-up in progress', async () => {
  const h = harness();
  h.state.stamp = 2;
  h.state.onCall = () => {
    if (h.state.calls === 10) h.state.served++;
  };
  await interval();
  await interval();
  expect(h.state.listings).toBe(1);
  expect(h.state.calls).toBeGreaterThanOrEqual(10);
  expect(h.state.calls).toBeLessThan(10 + TENANT_WARMUP.concurrency);
  expect(h.ended()).toBe(true);
});

it('never warms once a real call has been served', async () => {
  const h = harness();
  h.state.served = 1;
  h.state.stamp = 2;
  await interval();
  await interval();
  expect(h.ended()).toBe(true);
  expect(h.state.listings).toBe(0);
});

it('keeps polling through a store read that throws', async () => {
  const h = harness();
  const good = h.state.stamp;
  let failing = true;
  Object.defineProperty(h.state, 'stamp', {
    get: () => {
      if (failing) throw new Error('SQLITE_BUSY');
      return good + 1;
    },
  });
  await interval();
  expect(h.state.listings).toBe(0);
  failing = false;
  await interval();
  await interval();
  expect(h.state.listings).toBe(1);
  await h.watch.stop();
});
