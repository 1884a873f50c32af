/**
 * Store-read worker: runs the embedded store's SQLite reads (hot, FTS5 search, directive) off the main
 * thread. better-sqlite3 is synchronous, and a cold search over a large agent takes about a millisecond:
 * on the main thread that would stall every other call's gRPC and retrieval I/O (SPEC §1).
 * Imports only the store module, never the server.
 */
import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { EmbeddedStore } from '../src/retrieval/embedded-store.js';
import type { StoreReadTask } from '../src/retrieval/store-reader.js';

// bench:load splits the server's CPU per thread by name (issue 10).
nameThisThread(THREAD_NAMES.store);

// One connection per database file per thread, opened on first use.
const stores = new Map<string, EmbeddedStore>();

function storeFor(path: string): EmbeddedStore {
  let store = stores.get(path);
  if (!store) {
    store = EmbeddedStore.open(path);
    stores.set(path, store);
  }
  return store;
}

/** Piscina task entry point: one read, answered with plain (cloneable) rows. */
export default function storeRead(task: StoreReadTask): unknown {
  // The branch gave up while this read was queued: nobody will look at the answer.
  if (task.cancelled !== undefined && Atomics.load(task.cancelled, 0) === 1) return [];
  const store = storeFor(task.db);
  switch (task.op) {
    case 'hot':
      return store.hot(task.orgId, task.agentId, { maxChars: task.maxChars });
    case 'search':
      return store.search(task.orgId, task.agentId, task.query ?? '', { maxChars: task.maxChars });
    case 'directive':
      return store.getDirective(task.orgId, task.agentId);
  }
}
