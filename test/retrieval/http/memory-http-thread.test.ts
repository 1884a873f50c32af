/**
 * The memory service client in its memory-fetch thread (src/retrieval/http/memory-http-thread.ts)
 * answers exactly what the in-process client answers — hits, their bytes, the branch errors and their
 * details — against a real memory server on loopback, and a branch that gives up aborts its request in
 * the thread at once.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isBranchError } from '../../../src/retrieval/branch-error.js';
import { HttpMemorySource } from '../../../src/retrieval/http/memory-http.js';
import {
  HEAVY_BODY_BYTES,
  RoutedMemorySource,
  ThreadedMemorySource,
} from '../../../src/retrieval/http/memory-http-thread.js';
import type { EmbeddedStore } from '../../../src/retrieval/sqlite/embedded-store.js';
import type { ValidatedHits } from '../../../src/retrieval/validate.js';
import { contentText } from '../../../src/text/content-bytes.js';
import { type MemoryServerHandle, startMemoryServer } from '../../../src/tools/memory-server/server.js';
import { memoriesOf, memoryRow, NO_FAULTS, removeTempDir, tempStore } from '../fixtures.js';

const TOKEN = `tok-${randomUUID()}`;
const ORG = randomUUID();
const AGENT = randomUUID();
/** An org whose memory service answers large bodies: 20 memories of 10,000 characters (~200 KB). */
const HEAVY_ORG = randomUUID();
const HEAVY_AGENT = randomUUID();

let store: EmbeddedStore;
let dir: string;
let server: MemoryServerHandle;
let inProcess: HttpMemorySource;
let threaded: ThreadedMemorySource;
const never = () => new AbortController().signal;

/** A source's answer with every content as text, so the two sources' answers compare as values. */
const asText = (v: ValidatedHits) => ({
  ...v,
  hits: v.hits.map((h) => ({ ...h, content: h.content === null ? null : contentText(h.content) })),
});

/** The branch error a call rejects with, as `[code, status, detail]`. */
async function failure(p: Promise<unknown>): Promise<[string, string, string]> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  if (!isBranchError(err)) throw new Error(`expected a branch error, got ${String(err)}`);
  return [err.code, err.status, err.detail];
}

beforeAll(async () => {
  ({ store, dir } = tempStore());
  store.upsertMemories([
    ...memoriesOf(ORG, AGENT, 12),
    memoryRow(ORG, AGENT, `sailing <b>&amp;</b> 绿茶 😀 ${'x'.repeat(70_000)}`, 90),
    memoryRow(ORG, AGENT, 'sailing on the lake with 绿茶 and 😀 <tags>', 91),
    ...Array.from({ length: 20 }, (_, i) =>
      memoryRow(HEAVY_ORG, HEAVY_AGENT, `sailing ${'y'.repeat(10_000)}`, i),
    ),
  ]);
  server = await startMemoryServer({ store, token: TOKEN, port: 0 });
  const config = { baseUrl: `${server.url}/`, token: TOKEN, hotTimeoutMs: 5000, coldTimeoutMs: 5000 };
  inProcess = new HttpMemorySource(config);
  threaded = new ThreadedMemorySource(config);
  threaded.warm();
});
afterAll(async () => {
  await threaded?.close();
  await inProcess?.close();
  await server?.close();
  store?.close();
  removeTempDir(dir);
});

describe('ThreadedMemorySource', () => {
  it('answers hot and search exactly as the in-process client, contents as bytes', async () => {
    server.setFaults(NO_FAULTS);
    const hot = await threaded.hot(ORG, AGENT, never());
    expect(hot.hits.length).toBeGreaterThan(0);
    expect(hot.hits.every((h) => h.content === null || h.content instanceof Uint8Array)).toBe(true);
    expect(asText(hot)).toEqual(asText(await inProcess.hot(ORG, AGENT, never())));
    const cold = await threaded.search(ORG, AGENT, 'sailing 绿茶', never());
    expect(cold.hits.length).toBeGreaterThan(0);
    expect(asText(cold)).toEqual(asText(await inProcess.search(ORG, AGENT, 'sailing 绿茶', never())));
    // The 70,000-character memory is over the default cap: dropped as oversize on both paths.
    expect(cold.oversize).toBe(1);
  });

  it('another org sees nothing of this one, on both paths', async () => {
    server.setFaults(NO_FAULTS);
    const other = randomUUID();
    const threadedHits = await threaded.hot(other, AGENT, never());
    expect(threadedHits.hits).toEqual([]);
    expect(asText(threadedHits)).toEqual(asText(await inProcess.hot(other, AGENT, never())));
  });

  it("HTTP 503 and invalid JSON fail the branch with the contract's details, as in process", async () => {
    server.setFaults({ ...NO_FAULTS, errorRate: 1 });
    expect(await failure(threaded.hot(ORG, AGENT, never()))).toEqual(
      await failure(inProcess.hot(ORG, AGENT, never())),
    );
    expect(await failure(threaded.hot(ORG, AGENT, never()))).toEqual([
      'IBEX_RETRIEVAL_HTTP_STATUS',
      'error',
      'memory service HTTP 503',
    ]);
    server.setFaults({ ...NO_FAULTS, malformedRate: 1 });
    expect(await failure(threaded.search(ORG, AGENT, 'sailing', never()))).toEqual([
      'IBEX_RETRIEVAL_INVALID_JSON',
      'error',
      'invalid JSON',
    ]);
    server.setFaults(NO_FAULTS);
  });

  it('an unreachable service fails the branch as in process', async () => {
    const down = { baseUrl: 'http://127.0.0.1:9/', token: TOKEN, hotTimeoutMs: 5000, coldTimeoutMs: 5000 };
    const a = new ThreadedMemorySource(down);
    const b = new HttpMemorySource(down);
    try {
      const [code, status, detail] = await failure(a.hot(ORG, AGENT, never()));
      expect([code, status, detail]).toEqual(await failure(b.hot(ORG, AGENT, never())));
      expect(detail).toMatch(/^memory service unreachable \(/);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('a branch that gives up gets its signal’s reason at once, and the thread goes on serving', async () => {
    server.setFaults({ ...NO_FAULTS, latencyMs: 60_000 });
    const before = server.stats.hot;
    const controller = new AbortController();
    const p = threaded.hot(ORG, AGENT, controller.signal);
    // The request reached the server (it is now held by the injected latency).
    const giveUp = Date.now() + 10_000;
    while (server.stats.hot === before) {
      if (Date.now() > giveUp) throw new Error('the request never reached the memory server');
      await new Promise((r) => setTimeout(r, 5));
    }
    const reason = new Error('branch timeout');
    controller.abort(reason);
    await expect(p).rejects.toBe(reason);
    // The thread was not terminated: the next read on it is answered.
    server.setFaults(NO_FAULTS);
    const next = await threaded.hot(ORG, AGENT, never());
    expect(next.hits.length).toBeGreaterThan(0);
  });

  it('a signal aborted before the call never reaches the thread', async () => {
    const controller = new AbortController();
    const reason = new Error('already late');
    controller.abort(reason);
    const before = server.stats.total;
    await expect(threaded.search(ORG, AGENT, 'sailing', controller.signal)).rejects.toBe(reason);
    expect(server.stats.total).toBe(before);
  });

  it('refuses a base URL that is not http(s), on the calling thread', () => {
    expect(
      () =>
        new ThreadedMemorySource({ baseUrl: 'ftp://x/', token: TOKEN, hotTimeoutMs: 1, coldTimeoutMs: 1 }),
    ).toThrow('memory base URL must be http or https');
  });
});

describe('RoutedMemorySource', () => {
  it('reads an org on the event loop until it answers a large body, then in the thread for the hold, then once on the loop again', async () => {
    server.setFaults(NO_FAULTS);
    let now = 0;
    const routed = new RoutedMemorySource(
      { baseUrl: server.url, token: TOKEN, hotTimeoutMs: 5000, coldTimeoutMs: 5000 },
      { holdMs: 1000, now: () => now },
    );
    try {
      // Small bodies: the quiet org stays on the event loop.
      const quiet = await routed.hot(ORG, AGENT, never());
      expect(asText(quiet)).toEqual(asText(await inProcess.hot(ORG, AGENT, never())));
      expect(routed.isHeavy(ORG)).toBe(false);
      // The heavy org's first read is on the loop; its ~200 KB body marks it.
      const first = await routed.hot(HEAVY_ORG, HEAVY_AGENT, never());
      expect(first.hits).toHaveLength(20);
      expect(routed.threadReads).toBe(0);
      expect(routed.isHeavy(HEAVY_ORG)).toBe(true);
      // Then its reads go to the thread, with the same answer; the quiet org's do not.
      now = 999;
      const second = await routed.hot(HEAVY_ORG, HEAVY_AGENT, never());
      expect(routed.threadReads).toBe(1);
      expect(asText(second)).toEqual(asText(first));
      await routed.search(HEAVY_ORG, HEAVY_AGENT, 'sailing', never());
      expect(routed.threadReads).toBe(2);
      await routed.search(ORG, AGENT, 'sailing', never());
      expect(routed.threadReads).toBe(2);
      // Past the hold: one read on the loop again, which marks the org anew.
      now = 1000;
      expect(routed.isHeavy(HEAVY_ORG)).toBe(false);
      await routed.hot(HEAVY_ORG, HEAVY_AGENT, never());
      expect(routed.threadReads).toBe(2);
      expect(routed.isHeavy(HEAVY_ORG)).toBe(true);
      expect(routed.stats()).toEqual({ threadReads: 2, heavyOrgs: 1 });
      now = 2000;
      expect(routed.stats()).toEqual({ threadReads: 2, heavyOrgs: 0 });
    } finally {
      await routed.close();
    }
  });

  it('a body refused for its size marks the org too', async () => {
    server.setFaults(NO_FAULTS);
    const routed = new RoutedMemorySource({
      baseUrl: server.url,
      token: TOKEN,
      hotTimeoutMs: 5000,
      coldTimeoutMs: 5000,
      maxResponseBytes: HEAVY_BODY_BYTES + 1,
    });
    try {
      expect(await failure(routed.hot(HEAVY_ORG, HEAVY_AGENT, never()))).toEqual([
        'IBEX_RETRIEVAL_TOO_LARGE',
        'error',
        'response too large',
      ]);
      expect(routed.isHeavy(HEAVY_ORG)).toBe(true);
      expect(routed.isHeavy(ORG)).toBe(false);
    } finally {
      await routed.close();
    }
  });
});
