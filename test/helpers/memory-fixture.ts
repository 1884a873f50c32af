/**
 * The memory HTTP service of tests that read memories over HTTP: the dev memory server on loopback, on a
 * store of its own (the service under test reads it only over HTTP).
 */
import type { MemoryRow } from '../../src/retrieval/sqlite/embedded-store.js';
import {
  type MemoryServerHandle,
  type MemoryServerOptions,
  startMemoryServer,
} from '../../src/tools/memory-server/server.js';
import { memoryService, tempServiceStore } from '../e2e/harness.js';

/** A dev memory server started by {@link startMemoryFixture}. */
export interface MemoryFixture {
  memory: MemoryServerHandle;
  /** Settings pointing a service at it (base URL and bearer token). */
  env: Record<string, string>;
  /** Stops the server and removes its store. */
  close(): Promise<void>;
}

/**
 * The dev memory server on port 0 serving `rows`, with `opts` (token, injected latency and faults). Per-org
 * behaviour (one slow agent beside a quiet one) is two fixtures behind `startMemoryRouter`
 * (test/faults/helpers.ts).
 */
export async function startMemoryFixture(
  rows: readonly MemoryRow[],
  opts: Omit<MemoryServerOptions, 'store' | 'db' | 'port'>,
): Promise<MemoryFixture> {
  const data = tempServiceStore('ibex-mem-');
  data.store.upsertMemories(rows);
  const memory = await startMemoryServer({ ...opts, store: data.store, port: 0 });
  return {
    memory,
    env: memoryService(memory.url, opts.token),
    async close() {
      await memory.close();
      data.close();
    },
  };
}
