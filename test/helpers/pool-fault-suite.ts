/**
 * A describe block's pool-fault service (test/faults/helpers.ts) on a fresh embedded store, started before
 * its tests and stopped after them.
 */
import { afterAll, beforeAll } from 'vitest';
import type { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { fixedPool, tempServiceStore } from '../e2e/harness.js';
import { type PoolFaultService, startPoolFaultService } from '../faults/helpers.js';

/** What the suite's tests use; set once its `beforeAll` has run. */
export interface PoolFaultSuite {
  svc: PoolFaultService;
  data: ReturnType<typeof tempServiceStore>;
}

/**
 * Registers the `beforeAll` / `afterAll` of a pool-fault service on a temp store (directory `prefix`…),
 * filled by `fill`, with a fixed pool of `threads` threads and `queue` places, then `env`.
 * @returns the suite, whose `svc` and `data` the tests read.
 */
export function poolFaultSuite(
  prefix: string,
  fill: (store: EmbeddedStore) => void,
  pool: { threads: number; queue: number },
  env: Record<string, string> = {},
): PoolFaultSuite {
  const suite = {} as PoolFaultSuite;
  beforeAll(async () => {
    suite.data = tempServiceStore(prefix);
    fill(suite.data.store);
    suite.svc = await startPoolFaultService({
      IBEX_CONTEXT_EMBEDDED_DB: suite.data.db,
      ...fixedPool(pool.threads, pool.queue),
      ...env,
    });
  });
  afterAll(async () => {
    await suite.svc?.stop();
    suite.data?.close();
  });
  return suite;
}
