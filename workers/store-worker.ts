/**
 * Store-read worker: runs the embedded store's SQLite reads (hot, FTS5 search, directive) off the main
 * thread. better-sqlite3 is synchronous, and a cold search over a large agent takes about a millisecond:
 * on the main thread that would stall every other call's gRPC and retrieval I/O (SPEC §1).
 * Imports only the store module, never the server.
 */
import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { transferred } from '../src/pool/transfer-result.js';
import { bytesInPlace } from '../src/retrieval/content-bytes.js';
import { EmbeddedStore, type StoreHit } from '../src/retrieval/embedded-store.js';
import type {
  StoreRead,
  StoreReadAnswer,
  StoreReadBatch,
  StoreReadReply,
} from '../src/retrieval/store-reader.js';

// bench:load splits the server's CPU per thread by name (issue 10).
nameThisThread(THREAD_NAMES.store);

// One connection per database file per thread, opened on first use.
const stores = new Map<string, EmbeddedStore>();

function storeFor(path: string): EmbeddedStore {
  let store = stores.get(path);
  if (!store) {
    // No read cache: the main thread caches, and asks here only on its misses, which must see every
    // commit (this thread's cache would notice another thread's commits only within 10 ms).
    store = EmbeddedStore.open(path, { cache: false });
    stores.set(path, store);
  }
  return store;
}

function readOne(store: EmbeddedStore, read: StoreRead, maxChars: number | undefined): unknown {
  switch (read.op) {
    case 'hot':
      return store.hot(read.orgId, read.agentId, { maxChars });
    case 'search':
      return store.search(read.orgId, read.agentId, read.query ?? '', { maxChars });
    case 'directive':
      return store.getDirective(read.orgId, read.agentId);
  }
}

/**
 * Piscina task entry point: a batch of reads, answered in order with plain (cloneable) values, hits'
 * contents as UTF-8 bytes on transferred buffers (content-bytes.ts), and this thread's time on them (the
 * reader sizes its queue from it).
 */
export default function storeRead(batch: StoreReadBatch): StoreReadReply {
  const started = performance.now();
  const store = storeFor(batch.db);
  const transfer: ArrayBuffer[] = [];
  const answers = batch.reads.map((read): StoreReadAnswer => {
    try {
      const value = readOne(store, read, batch.maxChars);
      // Hits' contents cross as UTF-8 bytes on a transferred buffer: the event loop never decodes them.
      if (Array.isArray(value)) {
        const contents = bytesInPlace((value as StoreHit[]).map((hit) => hit.memory));
        if (contents !== null) transfer.push(contents);
      }
      return { ok: true, value };
    } catch (err) {
      const code = (err as { code?: unknown })?.code;
      return {
        ok: false,
        code: typeof code === 'string' ? code : 'error',
        message: err instanceof Error ? err.message : String(err),
      };
    }
  });
  const reply = { answers, runMs: performance.now() - started };
  return transfer.length === 0 ? reply : transferred(reply, transfer);
}
