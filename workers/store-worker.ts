/** Store-read worker: the embedded store's synchronous SQLite reads off the event loop (contract.md §1). */
import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { transferred } from '../src/pool/transfer-result.js';
import { EmbeddedStore, type StoreHit } from '../src/retrieval/sqlite/embedded-store.js';
import { packHits } from '../src/retrieval/sqlite/packed-hits.js';
import type {
  StoreRead,
  StoreReadAnswer,
  StoreReadBatch,
  StoreReadReply,
} from '../src/retrieval/sqlite/store-reader.js';
import { SEARCH_LIMIT } from '../src/retrieval/validate.js';
import { WARM_QUERY, warmMemoryRows } from '../src/retrieval/warm-memories.js';
import { bytesInPlace, type MemoryContent } from '../src/text/content-bytes.js';

// bench:load splits the server's CPU per thread by name.
nameThisThread(THREAD_NAMES.store);

const stores = new Map<string, EmbeddedStore>();

function storeFor(path: string): EmbeddedStore {
  let store = stores.get(path);
  if (!store) {
    // No read cache: the main thread caches, and its misses must see every commit at once.
    store = EmbeddedStore.open(path, { cache: false });
    stores.set(path, store);
  }
  return store;
}

/** Hot hits stay in the wire shape (the main thread caches them); search hits are scoped here, sent in columns. */
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
      const validated = store.searchHits(read.orgId, read.agentId, read.query ?? '', {
        maxChars,
        limit,
        neighbours: read.neighbours ?? 0,
      });
      return packHits(validated, transfer) ?? withContentBytes(validated, validated.hits, transfer);
    }
    case 'directive':
      return store.getDirective(read.orgId, read.agentId);
  }
}

function withContentBytes<T>(
  value: T,
  holders: { content: MemoryContent | null }[],
  transfer: ArrayBuffer[],
): T {
  const contents = bytesInPlace(holders);
  if (contents !== null) transfer.push(contents);
  return value;
}

const WARM_ROWS = 600;
const WARM_SEARCHES = 30;

/** Runs the read path on synthetic memories before taking reads, so the first calls do not run it cold. */
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

/** A batch of reads, answered in order, with this thread's time on them (sizes the reader's queue). */
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
      // Contents cross as UTF-8 bytes on a transferred buffer: the event loop never decodes them.
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
