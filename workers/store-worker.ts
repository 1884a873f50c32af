/**
 * Store-read worker: runs the embedded store's SQLite reads (hot, FTS5 search, directive) off the main
 * thread. better-sqlite3 is synchronous, and a cold search over a large agent takes about a millisecond:
 * on the main thread that would stall every other call's gRPC and retrieval I/O (contract.md §1).
 * Imports only the store module, never the server.
 */
import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { transferred } from '../src/pool/transfer-result.js';
import { EmbeddedStore, type StoreHit } from '../src/retrieval/sqlite/embedded-store.js';
import type {
  StoreRead,
  StoreReadAnswer,
  StoreReadBatch,
  StoreReadReply,
} from '../src/retrieval/sqlite/store-reader.js';
import { DEFAULT_MAX_MEMORY_CHARS, SEARCH_LIMIT, validateHits } from '../src/retrieval/validate.js';
import { WARM_QUERY, warmMemoryRows } from '../src/retrieval/warm-memories.js';
import { bytesInPlace, type MemoryContent } from '../src/text/content-bytes.js';

// bench:load splits the server's CPU per thread by name.
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

/**
 * One read's value. Hot hits stay raw (the main thread caches them and validates a cached answer once);
 * search hits are validated and scoped here (contract.md §4.1, the same `validateHits` as on the main thread),
 * so that the event loop does no per-hit work for them. Contents become UTF-8 bytes on a buffer pushed
 * to `transfer`.
 */
function readOne(
  store: EmbeddedStore,
  read: StoreRead,
  maxChars: number | undefined,
  transfer: ArrayBuffer[],
): unknown {
  switch (read.op) {
    case 'hot': {
      const hits: StoreHit<MemoryContent>[] = store.hot(read.orgId, read.agentId, { maxChars });
      return withContentBytes(
        hits,
        hits.map((hit) => hit.memory),
        transfer,
      );
    }
    case 'search': {
      const limit = read.limit ?? SEARCH_LIMIT;
      const raw = store.search(read.orgId, read.agentId, read.query ?? '', {
        maxChars,
        limit,
        neighbours: read.neighbours ?? 0,
      });
      const limits = { limit, maxChars: maxChars ?? DEFAULT_MAX_MEMORY_CHARS };
      const validated = validateHits(raw, read.orgId, read.agentId, limits);
      return withContentBytes(validated, validated.hits, transfer);
    }
    case 'directive':
      return store.getDirective(read.orgId, read.agentId);
  }
}

/** `value`, its holders' contents turned into UTF-8 bytes on one buffer, which is added to `transfer`. */
function withContentBytes<T>(
  value: T,
  holders: { content: MemoryContent | null }[],
  transfer: ArrayBuffer[],
): T {
  const contents = bytesInPlace(holders);
  if (contents !== null) transfer.push(contents);
  return value;
}

/** Synthetic memories the thread warms on, and the searches it runs over them. */
const WARM_ROWS = 600;
const WARM_SEARCHES = 30;

/**
 * Runs this thread's read path (FTS5 search of hundreds of rows, row materialisation, validation, bytes)
 * on an in-memory store of synthetic memories (src/retrieval/warm-memories.ts) before the thread takes
 * reads, so the first calls of a large budget do not run it unoptimised. ~0.1 s at thread start.
 */
function warmThisThread(): void {
  const store = EmbeddedStore.open(':memory:', { cache: false });
  try {
    const orgId = '00000000-0000-4000-8000-00000000000a';
    const agentId = '00000000-0000-4000-8000-00000000000b';
    store.upsertMemories(warmMemoryRows(orgId, agentId, WARM_ROWS, Date.now()));
    for (let i = 0; i < WARM_SEARCHES; i++) {
      readOne(store, { op: 'search', orgId, agentId, query: WARM_QUERY, limit: WARM_ROWS }, undefined, []);
      readOne(store, { op: 'hot', orgId, agentId }, undefined, []);
    }
  } finally {
    store.close();
  }
}

warmThisThread();

/**
 * Piscina task entry point: a batch of reads, answered in order with plain (cloneable) values, hits'
 * contents as UTF-8 bytes on transferred buffers (content-bytes.ts), and this thread's time on them (the
 * reader sizes its queue from it).
 */
export default function storeRead(batch: StoreReadBatch): StoreReadReply {
  const started = performance.now();
  const store = storeFor(batch.db);
  if (batch.inclusions !== undefined) {
    try {
      const changes = store.addInclusions(batch.inclusions);
      return { answers: [], runMs: performance.now() - started, changes };
    } catch (err) {
      const code = (err as { code?: unknown })?.code;
      const failed: StoreReadAnswer = {
        ok: false,
        code: typeof code === 'string' ? code : 'error',
        message: err instanceof Error ? err.message : String(err),
      };
      return { answers: [failed], runMs: performance.now() - started };
    }
  }
  const transfer: ArrayBuffer[] = [];
  const answers = batch.reads.map((read): StoreReadAnswer => {
    try {
      // Hits' contents cross as UTF-8 bytes on a transferred buffer: the event loop never decodes them.
      return { ok: true, value: readOne(store, read, batch.maxChars, transfer) };
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
