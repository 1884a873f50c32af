/**
 * Store-read threads (the service's embedded FTS5 searches): same answers as in-process reads, and a
 * search whose branch already gave up is skipped by the worker.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PooledStoreReads } from '../../src/retrieval/store-reader.js';
import { memoriesOf, removeTempDir, tempStore } from './fixtures.js';

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
  it('answers a search exactly as the in-process store does', async () => {
    const pooled = await reads.search(org, agent, 'memory about sailing');
    expect(pooled.length).toBeGreaterThan(0);
    expect(pooled).toEqual(fixture.store.search(org, agent, 'memory about sailing'));
  });

  it('skips a search whose signal has already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    expect(await reads.search(org, agent, 'memory about sailing', controller.signal)).toEqual([]);
    // The thread is still fine afterwards.
    expect((await reads.search(org, agent, 'sailing')).length).toBeGreaterThan(0);
  });
});
