/**
 * Reads of the embedded store: store-read threads (the service's FTS5 searches) answer as in-process
 * reads do and skip a search whose branch gave up; both apply the caps (at most `limit` hits, oversize
 * memories without their text); hot reads and directives come from the read cache until a
 * write.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSettings } from '../../../src/config/settings.js';
import { projectRoot } from '../../../src/pool/worker-file.js';
import { retrieve, type SourceHits, type ValidatedHits } from '../../../src/retrieval/retrieve.js';
import { createSources, EmbeddedMemorySource } from '../../../src/retrieval/sources.js';
import { EmbeddedStore, type StoreHit } from '../../../src/retrieval/sqlite/embedded-store.js';
import {
  MAX_BATCH,
  PIPELINE_DEPTH,
  PooledStoreReads,
  STORE_QUEUE_BUDGET_MS,
  type StoreReads,
  storeQueueLimit,
} from '../../../src/retrieval/sqlite/store-reader.js';
import { SEARCH_LIMIT, validateHits } from '../../../src/retrieval/validate.js';
import { contentText } from '../../../src/text/content-bytes.js';
import {
  memoriesOf,
  memoryRow,
  removeTempDir,
  retrieveEmbedded,
  tempStore,
  useTempStore,
} from '../fixtures.js';

const org = randomUUID();
const agent = randomUUID();
let fixture: ReturnType<typeof tempStore>;
let reads: PooledStoreReads;

beforeAll(async () => {
  fixture = tempStore();
  fixture.store.upsertMemories(memoriesOf(org, agent, 20));
  reads = await PooledStoreReads.start(fixture.file, 1);
});

afterAll(async () => {
  await reads?.close();
  fixture?.store.close();
  removeTempDir(fixture.dir);
});

describe('PooledStoreReads', () => {
  it('answers a search validated and scoped in the thread, exactly as validating the in-process answer', async () => {
    const pooled = validated(await reads.search(org, agent, 'memory about sailing'));
    expect(pooled.hits.length).toBeGreaterThan(0);
    // The thread sends contents as UTF-8 bytes (content-bytes.ts), all on one transferred buffer.
    expect(pooled.hits.every((h) => h.content instanceof Uint8Array)).toBe(true);
    expect(new Set(pooled.hits.map((h) => (h.content as Uint8Array).buffer)).size).toBe(1);
    const asText = { ...pooled, hits: pooled.hits.map((h) => ({ ...h, content: contentText(h.content) })) };
    const inProcess = fixture.store.search(org, agent, 'memory about sailing');
    expect(asText).toEqual(validateHits(inProcess, org, agent, { limit: SEARCH_LIMIT, maxChars: 65_536 }));
  });

  it('writes inclusion counts in the thread, scoped by org, and reads see them', async () => {
    const hot = fixture.store.hot(org, agent);
    const [a, b] = [hot[0]!.memory.id, hot[1]!.memory.id];
    const before = (id: string) => fixture.store.hot(org, agent).find((h) => h.memory.id === id)!;
    const countOf = (id: string) => Number(before(id).memory.retrieval_count ?? 0);
    const [a0, b0] = [countOf(a), countOf(b)];
    const changes = await reads.addInclusions([
      { orgId: org, memoryId: a, count: 3 },
      { orgId: randomUUID(), memoryId: b, count: 5 }, // another org: nothing changes
    ]);
    expect(changes).toBe(1);
    // Another connection's commit reaches this one's read cache within its 10 ms check interval.
    await new Promise((resolve) => setTimeout(resolve, 25));
    expect(countOf(a)).toBe(a0 + 3);
    expect(countOf(b)).toBe(b0);
    expect(await reads.addInclusions([])).toBe(0);
    // Reads go on in the same thread.
    expect(validated(await reads.search(org, agent, 'sailing')).hits.length).toBeGreaterThan(0);
  });

  it('skips a search whose signal has already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    expect(await reads.search(org, agent, 'memory about sailing', controller.signal)).toEqual([]);
    // The thread is still fine afterwards.
    expect(validated(await reads.search(org, agent, 'sailing')).hits.length).toBeGreaterThan(0);
  });

  it('applies the content cap in the thread: an oversize row crosses without its text, counted oversize', async () => {
    const capped = await PooledStoreReads.start(fixture.file, 1, undefined, 28);
    try {
      const answer = validated(await capped.search(org, agent, 'gardening'));
      // `note memory 0 about gardening` is 29 code points, `note memory 5 …` too; nothing fits 28.
      expect(answer.hits).toEqual([]);
      expect(answer.oversize).toBeGreaterThan(0);
      expect(answer.invalid).toBe(0);
      const uncapped = validated(await reads.search(org, agent, 'gardening'));
      expect([uncapped.hits.length, uncapped.oversize]).toEqual([answer.oversize, 0]);
    } finally {
      await capped.close();
    }
  });
});

/** A pooled search's answer: the thread validated it (an array would be raw hits). */
function validated(answer: SourceHits): ValidatedHits {
  if (Array.isArray(answer)) throw new Error('expected hits validated in the thread, got raw hits');
  return answer as ValidatedHits;
}

const ECHO = path.join(projectRoot(), 'dist', 'test', 'fixtures', 'batch-echo-store-worker.js');

describe('PooledStoreReads batching and its queue limit', () => {
  it('reads that wait for the busy thread go to it together, in one task; what overflows is refused', async () => {
    const echo = await PooledStoreReads.start(fixture.file, 1, ECHO);
    try {
      // The thread's PIPELINE_DEPTH (2) slots: one read runs, the next waits in the thread's port.
      const first = echo.search(org, agent, 'hold_ms=50');
      const second = echo.search(org, agent, 'second');
      const aborted = new AbortController();
      const queued = ['a', 'b', 'c'].map((q) => echo.search(org, agent, q));
      const gaveUp = echo.search(org, agent, 'gave up', aborted.signal);
      // Nothing measured yet: 4 may wait on one thread; the fifth and sixth are refused at once.
      const refused = Promise.allSettled([echo.search(org, agent, 'x'), echo.search(org, agent, 'y')]);
      expect(echo.stats()).toEqual({ queueSize: 4, busyRejections: 2 });
      aborted.abort();
      expect(await first).toEqual({ batch: 1, query: 'hold_ms=50' });
      expect(await second).toEqual({ batch: 1, query: 'second' });
      // The branch that gave up is answered [] without running: the batch holds the other three.
      expect(await Promise.all(queued)).toEqual(['a', 'b', 'c'].map((query) => ({ batch: 3, query })));
      expect(await gaveUp).toEqual([]);
      for (const r of await refused) {
        expect(r.status === 'rejected' && (r.reason as { code?: string }).code).toBe('busy');
        // A refusal is flow control: built without a stack (util/stackless.ts).
        expect((r as PromiseRejectedResult).reason.stack).toBe('Error: store-read queue full');
      }
    } finally {
      await echo.close();
    }
  });

  it("a refused read reaches the cold branch as the read queue's refusal, not as SQLite's busy", async () => {
    const refusing: StoreReads = {
      hot: () => [],
      search: () => Promise.reject(Object.assign(new Error('store-read queue full'), { code: 'busy' })),
      getDirective: () => null,
      close: async () => {},
    };
    const source = new EmbeddedMemorySource(refusing);
    await expect(source.search(org, agent, 'q', new AbortController().signal)).rejects.toMatchObject({
      detail: 'embedded store unavailable (busy: read queue full)',
    });
  });

  it('the thread starts its next batch while the event loop is still busy (PIPELINE_DEPTH)', async () => {
    expect(PIPELINE_DEPTH).toBe(2);
    const echo = await PooledStoreReads.start(fixture.file, 1, ECHO);
    try {
      const first = echo.search(org, agent, 'hold_ms=10');
      const second = echo.search(org, agent, 'started');
      // The event loop cannot read the first reply nor dispatch again until this block ends: with one
      // batch per thread the second read would start after it.
      const blockEnd = performance.timeOrigin + performance.now() + 300;
      while (performance.timeOrigin + performance.now() < blockEnd) {}
      await first;
      const { startedAt } = (await second) as unknown as { startedAt: number };
      expect(startedAt).toBeLessThan(blockEnd);
    } finally {
      await echo.close();
    }
  });

  it('hot reads and directives waiting behind searches go first, in a batch of their own', async () => {
    const echo = await PooledStoreReads.start(fixture.file, 1, ECHO);
    try {
      const order: string[] = [];
      const seen = <T>(name: string, read: Promise<T>) =>
        read.then((value) => {
          order.push(name);
          return value;
        });
      const first = seen('first', echo.search(org, agent, 'hold_ms=30'));
      const second = seen('second', echo.search(org, agent, 'second'));
      const searches = ['a', 'b'].map((q) => seen(q, echo.search(org, agent, q)));
      const hot = seen('hot', echo.hot(org, agent));
      const directive = seen('directive', echo.getDirective(org, agent));
      await Promise.all([first, second, ...searches, hot, directive]);
      expect(order).toEqual(['first', 'second', 'hot', 'directive', 'a', 'b']);
      expect(await hot).toEqual({ batch: 2 });
      expect(await searches[0]).toEqual({ batch: 2, query: 'a' });
    } finally {
      await echo.close();
    }
  });

  it('a full queue refuses the newest read of an org with two more waiting, not the newcomer', async () => {
    const echo = await PooledStoreReads.start(fixture.file, 1, ECHO);
    try {
      // `first` runs, h1 waits in the thread's port, h2–h5 fill the queue (4): the other org's read finds
      // it full and the heavy org's newest (h5) is refused in its place.
      const first = echo.search(org, agent, 'hold_ms=20');
      const heavy = ['h1', 'h2', 'h3', 'h4', 'h5'].map((q) => echo.search(org, agent, q));
      const other = echo.search(randomUUID(), agent, 'light');
      const outcomes = await Promise.allSettled([first, ...heavy, other]);
      expect(outcomes.map((o) => o.status)).toEqual([
        'fulfilled',
        'fulfilled',
        'fulfilled',
        'fulfilled',
        'fulfilled',
        'rejected',
        'fulfilled',
      ]);
    } finally {
      await echo.close();
    }
  });

  it('the queue is sized from the time the thread reports, not from a late event loop', async () => {
    const echo = await PooledStoreReads.start(fixture.file, 1, ECHO);
    try {
      for (let i = 0; i < 40; i++) {
        const read = echo.search(org, agent, 'run_ms=0.05');
        // The reply waits ≥ 10 ms for this thread: a round trip would measure 10 ms per read (limit 4).
        const until = performance.now() + 10;
        while (performance.now() < until) {}
        await read;
      }
      // 0.05 ms per read: 8 ms of queue is 160 reads, capped at 64; w0 waits in the thread's port, w1–w64
      // in the queue, none is refused.
      const first = echo.search(org, agent, 'hold_ms=20');
      const queued = Array.from({ length: 65 }, (_, i) => echo.search(org, agent, `w${i}`));
      expect(echo.stats()).toEqual({ queueSize: 64, busyRejections: 0 });
      expect(await first).toEqual({ batch: 1, query: 'hold_ms=20' });
      expect((await Promise.all(queued)).map((a) => (a as unknown as { query: string }).query)).toEqual(
        queued.map((_, i) => `w${i}`),
      );
    } finally {
      await echo.close();
    }
  });

  it('the queue limit is STORE_QUEUE_BUDGET_MS of measured read time per thread, within 4/thread..64', () => {
    expect(storeQueueLimit(STORE_QUEUE_BUDGET_MS / 4, 1)).toBe(4);
    expect(storeQueueLimit(0.4, 1)).toBe(20);
    expect(storeQueueLimit(0.4, 2)).toBe(40);
    expect(storeQueueLimit(0.01, 1)).toBe(64);
    expect(storeQueueLimit(50, 2)).toBe(8);
    expect(MAX_BATCH).toBeLessThanOrEqual(storeQueueLimit(STORE_QUEUE_BUDGET_MS / 4, 2));
  });
});

const ORG = randomUUID();
const AGENT = randomUUID();
const fx = useTempStore();

/** One memory of `content` for ORG/AGENT, created at `i` minutes. */
const memory = (content: string, i = 0) => memoryRow(ORG, AGENT, content, i);

describe('caps and the read cache', () => {
  it('a memory longer than maxMemoryChars code points comes back oversize, without its text', async () => {
    fx.store.close();
    fx.reopen({ maxMemoryChars: 10 });
    // 10 emoji = 10 code points (20 UTF-16 units): kept; 11 = oversize.
    fx.store.upsertMemories([memory('😀'.repeat(10), 0), memory(`${'😀'.repeat(10)}x`, 1)]);
    const hot = fx.store.hot(ORG, AGENT);
    expect(hot.map((h) => [h.memory.content, h.oversize])).toEqual([
      [null, true],
      ['😀'.repeat(10), undefined],
    ]);
    expect(fx.store.hot(ORG, AGENT, { maxChars: 11 }).every((h) => h.oversize === undefined)).toBe(true);
    const r = await retrieveEmbedded(fx.store, {
      orgId: ORG,
      agentId: AGENT,
      query: '',
      skipHot: false,
      skipCold: true,
    });
    expect(r.hot.map((h) => contentText(h.content))).toEqual(['😀'.repeat(10)]);
    // Counted as contract.md §4.1 `oversize` (it was once counted as invalid), and named in the branch detail.
    expect(r.bounded.oversize).toBe(1);
    expect(r.dropped.invalid).toBe(0);
    expect(r.branches[1]!.detail).toBe('dropped 1 oversize');
  });

  it('hot and search return at most limit hits (hot 20, cold 10)', () => {
    fx.store.upsertMemories(Array.from({ length: 30 }, (_, i) => memory(`gardening note ${i}`, i)));
    expect(fx.store.hot(ORG, AGENT)).toHaveLength(20);
    expect(fx.store.search(ORG, AGENT, 'gardening')).toHaveLength(10);
    expect(fx.store.search(ORG, AGENT, 'gardening', { limit: 3 })).toHaveLength(3);
  });

  it('hot and directive reads are served from the cache until a write by this or another connection', () => {
    fx.store.upsertMemories([memory('first note', 0)]);
    const a = fx.store.hot(ORG, AGENT);
    // A cache hit hands out the very same (frozen) hit objects.
    expect(fx.store.hot(ORG, AGENT)[0]).toBe(a[0]);
    expect(Object.isFrozen(a[0])).toBe(true);
    // Another connection (as `ingest` would be) writes: the next read sees it.
    const writer = EmbeddedStore.open(fx.file);
    try {
      writer.upsertMemories([memory('second note', 1)]);
      expect(fx.store.hot(ORG, AGENT).map((h) => h.memory.content)).toEqual(['second note', 'first note']);
      const version = randomUUID();
      expect(fx.store.getDirective(ORG, AGENT)).toBeNull();
      writer.setDirective({
        org_id: ORG,
        agent_id: AGENT,
        content: 'v1',
        injection_mode: '',
        version_id: version,
      });
      expect(fx.store.getDirective(ORG, AGENT)?.content).toBe('v1');
    } finally {
      writer.close();
    }
    // This connection's own write.
    fx.store.setDirective({
      org_id: ORG,
      agent_id: AGENT,
      content: 'v2',
      injection_mode: '',
      version_id: randomUUID(),
    });
    expect(fx.store.getDirective(ORG, AGENT)?.content).toBe('v2');
    fx.store.deleteMemories(ORG, AGENT);
    expect(fx.store.hot(ORG, AGENT)).toEqual([]);
  });
});

describe('service sources: hot misses read in a store-read thread, then cached', () => {
  it('a hot read is cached after its first (threaded) read and a later write is seen at once', async () => {
    fx.store.upsertMemories([memory('first note', 0)]);
    const sources = await createSources(loadSettings({ IBEX_CONTEXT_EMBEDDED_DB: fx.file }));
    try {
      const signal = new AbortController().signal;
      const first = (await sources.memory.hot(ORG, AGENT, signal)) as StoreHit[];
      expect(first.map((h) => contentText(h.memory.content))).toEqual(['first note']);
      const again = (await sources.memory.hot(ORG, AGENT, signal)) as StoreHit[];
      // Served from the cache: the very same frozen hit, not a new structured clone.
      expect(again[0]).toBe(first[0]);
      expect(Object.isFrozen(again[0])).toBe(true);
      fx.store.upsertMemories([memory('second note', 1)]);
      const after = (await sources.memory.hot(ORG, AGENT, signal)) as StoreHit[];
      expect(after.map((h) => contentText(h.memory.content))).toEqual(['second note', 'first note']);
    } finally {
      await sources.close();
    }
  });
});

describe('a cached hot answer is validated once until a write', () => {
  it('two retrievals share the frozen validated hits; a write, or another agent, validates anew', async () => {
    fx.store.upsertMemories([memory('first note', 0)]);
    const sources = await createSources(loadSettings({ IBEX_CONTEXT_EMBEDDED_DB: fx.file }));
    const times = { wallMs: 1000, directiveMs: 1000, hotMs: 1000, coldMs: 1000 };
    const req = { orgId: ORG, agentId: AGENT, query: '', skipHot: false, skipCold: true };
    const signal = new AbortController().signal;
    try {
      await retrieve(sources, req, times, signal); // the miss, read in a thread, then cached
      const a = await retrieve(sources, req, times, signal);
      const b = await retrieve(sources, { ...req, orgId: ORG.toUpperCase() }, times, signal);
      expect(a.hot.map((h) => contentText(h.content))).toEqual(['first note']);
      expect(b.hot).toBe(a.hot);
      expect(Object.isFrozen(a.hot) && Object.isFrozen(a.hot[0])).toBe(true);
      const other = await retrieve(sources, { ...req, agentId: randomUUID() }, times, signal);
      expect(other.hot).toEqual([]);
      fx.store.upsertMemories([memory('second note', 1)]);
      await retrieve(sources, req, times, signal);
      const after = await retrieve(sources, req, times, signal);
      expect(after.hot).not.toBe(a.hot);
      expect(after.hot.map((h) => contentText(h.content))).toEqual(['second note', 'first note']);
    } finally {
      await sources.close();
    }
  });
});

describe('ReadCache generations (a load that straddles a write is not cached)', () => {
  it('put with the generation read before a write by another connection is refused', () => {
    fx.store.upsertMemories([memory('before', 0)]);
    const { hits, generation } = fx.store.cachedHot(ORG, AGENT);
    expect(hits).toBeUndefined();
    const stale = fx.store.hot(ORG, AGENT); // what a thread read before the write below
    const writer = EmbeddedStore.open(fx.file);
    try {
      writer.upsertMemories([memory('after', 1)]);
    } finally {
      writer.close();
    }
    // The write is noticed (cache emptied, generation moved) before the late answer arrives…
    expect(fx.store.cachedHot(ORG, AGENT).generation).not.toBe(generation);
    fx.store.cacheHot(ORG, AGENT, stale, generation);
    // …so the stale answer is not served; the next read has the write.
    expect(fx.store.cachedHot(ORG, AGENT).hits).toBeUndefined();
    expect(fx.store.hot(ORG, AGENT).map((h) => h.memory.content)).toEqual(['after', 'before']);
  });
});
