import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadSettings } from '../../../src/config/settings.js';
import { HttpMemorySource } from '../../../src/retrieval/http/memory-http.js';
import {
  type MemorySource,
  type RetrievalRequest,
  type RetrievalTimeouts,
  retrieve,
} from '../../../src/retrieval/retrieve.js';
import { createSources, EmbeddedDirectiveSource } from '../../../src/retrieval/sources.js';
import type { EmbeddedStore } from '../../../src/retrieval/sqlite/embedded-store.js';
import { run } from '../../../src/tools/cli/commands/memory-server.js';
import { type MemoryServerHandle, startMemoryServer } from '../../../src/tools/memory-server/server.js';
import { closedPort } from '../../helpers/closed-port.js';
import { bundle, memoriesOf, NO_FAULTS, removeTempDir, tempStore } from '../fixtures.js';

const TOKEN = `tok-${randomUUID()}`;
const ORG = randomUUID();
const AGENT = randomUUID();
const VERSION = randomUUID();

let store: EmbeddedStore;
let dir: string;
let server: MemoryServerHandle;
let memory: HttpMemorySource;

const req = (over: Partial<RetrievalRequest> = {}): RetrievalRequest => ({
  orgId: ORG,
  agentId: AGENT,
  query: 'sailing',
  skipHot: false,
  skipCold: false,
  ...over,
});
const relaxed: RetrievalTimeouts = { wallMs: 1000, directiveMs: 1000, hotMs: 1000, coldMs: 1000 };
/** For tests where only the HTTP client's own limits may end a branch, however loaded the machine. */
const far: RetrievalTimeouts = { wallMs: 20_000, directiveMs: 20_000, hotMs: 20_000, coldMs: 20_000 };
const sources = () => bundle(memory, new EmbeddedDirectiveSource(store));
const never = () => new AbortController().signal;

/**
 * Deadline tests run on a fake clock (real-clock bounds flaked on a loaded machine):
 * only setTimeout/clearTimeout and performance.now are faked, so the memory server and undici do real
 * loopback I/O while the wall, the branch timeouts and the server's injected latency move only when the
 * test advances the clock. Real latency is a bench figure, not a test bound.
 */
function fakeClock(): void {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
}

/** The memory source with the settlement of each call recorded, so a test knows when real I/O is done. */
function tracked(): { sources: ReturnType<typeof sources>; settled: Set<'hot' | 'cold'> } {
  const settled = new Set<'hot' | 'cold'>();
  const track = <T>(name: 'hot' | 'cold', p: Promise<T>) => {
    p.then(
      () => settled.add(name),
      () => settled.add(name),
    );
    return p;
  };
  const wrapped: MemorySource = {
    hot: (o, a, sig) => track('hot', memory.hot(o, a, sig)),
    search: (o, a, q, sig) => track('cold', memory.search(o, a, q, sig)),
    close: async () => {},
  };
  return { sources: bundle(wrapped, new EmbeddedDirectiveSource(store)), settled };
}

/** Waits (real time, on setImmediate, which stays real) until `cond` holds; fails after 10 s. */
async function until(cond: () => boolean, what: string): Promise<void> {
  const giveUp = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > giveUp) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** Resolves with whether `p` has settled (after letting pending callbacks run). */
async function isSettled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  p.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  await new Promise((r) => setImmediate(r));
  return done;
}

/**
 * Runs `run` on the fake clock, waits (real time) until `ready` holds (the calls it must outlast are in
 * flight), and asserts it settles exactly `atMs` after it started: not at `atMs − 1`, and at `atMs`.
 * @returns what the retrieval resolved with.
 */
async function settlesAt(
  atMs: number,
  run: () => ReturnType<typeof retrieve>,
  ready: () => boolean,
  what: string,
): ReturnType<typeof retrieve> {
  const started = performance.now();
  const p = run();
  await until(ready, what);
  await vi.advanceTimersByTimeAsync(atMs - 1);
  expect(await isSettled(p)).toBe(false);
  await vi.advanceTimersByTimeAsync(1);
  const r = await p;
  expect(performance.now() - started).toBe(atMs);
  return r;
}

beforeAll(async () => {
  ({ store, dir } = tempStore());
  store.upsertMemories(memoriesOf(ORG, AGENT, 8));
  store.setDirective({
    org_id: ORG,
    agent_id: AGENT,
    content: 'Be brief.',
    injection_mode: 'system_append',
    version_id: VERSION,
  });
  server = await startMemoryServer({ store, token: TOKEN, port: 0 });
  memory = new HttpMemorySource({
    baseUrl: `${server.url}/`,
    token: TOKEN,
    hotTimeoutMs: 1000,
    coldTimeoutMs: 1000,
  });
});
afterAll(async () => {
  await memory.close();
  await server.close();
  store.close();
  removeTempDir(dir);
});
afterEach(() => {
  vi.useRealTimers();
  server.setFaults(NO_FAULTS);
});

describe('retrieve over the memory HTTP wire (contract.md §4, §4.1)', () => {
  it('success: three branches, validated hits in order, measured latencies', async () => {
    const r = await retrieve(sources(), req(), relaxed, never());
    expect(r.branches.map((b) => [b.name, b.status, b.detail])).toEqual([
      ['directive', 'success', ''],
      ['hot', 'success', ''],
      ['cold', 'success', ''],
    ]);
    expect(r.directive).toEqual({
      content: 'Be brief.',
      injection_mode: 'system_append',
      version_id: VERSION,
    });
    expect(r.hot.map((h) => h.content)).toEqual(
      Array.from({ length: 8 }, (_, i) => memoriesOf(ORG, AGENT, 8)[7 - i]!.content),
    );
    expect(r.hot.map((h) => h.rank)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // Equal BM25 (same length, same term): the store breaks the tie by memory id.
    const sailing = memoriesOf(ORG, AGENT, 8).filter((m) => m.content.endsWith('sailing'));
    expect(r.cold.map((h) => h.content).sort()).toEqual(sailing.map((m) => m.content));
    expect(r.cold[0]!.memory_id < r.cold[1]!.memory_id).toBe(true);
    expect(r.cold[0]!.similarity).toBe(r.cold[1]!.similarity);
    expect(r.cold[0]!.similarity).toBeGreaterThan(0);
    expect(r.cold[0]!.source).toBe('fts');
    for (const b of r.branches) {
      expect(b.latency_ms).toBeGreaterThan(0);
      expect(b.latency_ms).toBeLessThan(1000);
    }
    expect(r.dropped).toEqual({ invalid: 0, foreign: 0 });
  });

  it('hot slower than its own timeout ⇒ timeout/hot_timeout at exactly its 30 ms; cold kept', async () => {
    server.setFaults({ latencyMs: 150, latencyRoute: 'hot' });
    const t: RetrievalTimeouts = { wallMs: 1000, directiveMs: 1000, hotMs: 30, coldMs: 1000 };
    fakeClock();
    const { sources: s, settled } = tracked();
    const r = await settlesAt(
      30,
      () => retrieve(s, req(), t, never()),
      () => settled.has('cold') && server.stats.hot > 0,
      'cold answered, hot received',
    );
    expect(r.branches[1]).toMatchObject({ name: 'hot', status: 'timeout', detail: 'hot_timeout' });
    expect(r.branches[1]!.latency_ms).toBe(30);
    expect(r.hot).toEqual([]);
    expect(r.branches[2]).toMatchObject({ status: 'success' });
    expect(r.cold).toHaveLength(2);
  });

  it('cold slower than the wall ⇒ timeout/outer_deadline; finished branches kept; returns at the wall', async () => {
    server.setFaults({ latencyMs: 400, latencyRoute: 'search' });
    const t: RetrievalTimeouts = { wallMs: 60, directiveMs: 1000, hotMs: 1000, coldMs: 1000 };
    const before = server.stats.search;
    fakeClock();
    const { sources: s, settled } = tracked();
    // At the wall exactly, not at the server's 400 ms.
    const r = await settlesAt(
      60,
      () => retrieve(s, req(), t, never()),
      () => settled.has('hot') && server.stats.search > before,
      'hot answered, search received',
    );
    expect(r.branches[2]).toMatchObject({ name: 'cold', status: 'timeout', detail: 'outer_deadline' });
    expect(r.branches[2]!.latency_ms).toBe(60);
    expect(r.branches[1]).toMatchObject({ name: 'hot', status: 'success' });
    expect(r.hot).toHaveLength(8);
    expect(r.directive?.content).toBe('Be brief.');
  });

  it('a hanging server: hot at its own 15 ms, cold outer_deadline at the 40 ms wall, five times', async () => {
    server.setFaults({ latencyMs: 60_000 });
    const t: RetrievalTimeouts = { wallMs: 40, directiveMs: 5, hotMs: 15, coldMs: 45 };
    fakeClock();
    for (let i = 0; i < 5; i++) {
      const before = { ...server.stats };
      const r = await settlesAt(
        40,
        () => retrieve(sources(), req(), t, never()),
        () => server.stats.hot > before.hot && server.stats.search > before.search,
        'both requests received',
      );
      // hot's own 15 ms timeout fires first; cold's 45 ms is beyond the 40 ms wall.
      expect(r.branches[1]).toMatchObject({ status: 'timeout', detail: 'hot_timeout', latency_ms: 15 });
      expect(r.branches[2]).toMatchObject({ status: 'timeout', detail: 'outer_deadline', latency_ms: 40 });
      expect(r.branches[0]).toMatchObject({ status: 'success' });
    }
  });

  it('HTTP 503 ⇒ error "memory service HTTP 503"', async () => {
    server.setFaults({ errorRate: 1 });
    const r = await retrieve(sources(), req(), relaxed, never());
    expect(r.branches[1]).toMatchObject({ status: 'error', detail: 'memory service HTTP 503' });
    expect(r.branches[2]).toMatchObject({ status: 'error', detail: 'memory service HTTP 503' });
    expect(r.hot).toEqual([]);
    expect(r.cold).toEqual([]);
    // The keep-alive pool survives error answers.
    server.setFaults({ errorRate: 0 });
    const ok = await retrieve(sources(), req(), relaxed, never());
    expect(ok.branches.map((b) => b.status)).toEqual(['success', 'success', 'success']);
  });

  it('a malformed body ⇒ error "invalid JSON"', async () => {
    server.setFaults({ malformedRate: 1 });
    const r = await retrieve(sources(), req(), relaxed, never());
    expect(r.branches[1]).toMatchObject({ status: 'error', detail: 'invalid JSON' });
    expect(r.branches[2]).toMatchObject({ status: 'error', detail: 'invalid JSON' });
  });

  it('a malformed item is dropped and counted, the rest kept', async () => {
    server.setFaults({ plantInvalid: true });
    const r = await retrieve(sources(), req(), relaxed, never());
    expect(r.hot).toHaveLength(8);
    expect(r.cold).toHaveLength(2);
    expect(r.branches[1]).toMatchObject({ status: 'success', detail: 'dropped 1 invalid' });
    expect(r.branches[2]).toMatchObject({ status: 'success', detail: 'dropped 1 invalid' });
    expect(r.dropped).toEqual({ invalid: 2, foreign: 0 });
  });

  it('planted foreign-org and foreign-agent hits are never returned and are counted', async () => {
    server.setFaults({ plantForeign: true, plantInvalid: true });
    const r = await retrieve(sources(), req(), relaxed, never());
    for (const h of [...r.hot, ...r.cold]) {
      expect(h.org_id).toBe(ORG);
      expect(h.agent_id).toBe(AGENT);
      expect(h.content).not.toMatch(/planted/);
    }
    expect(r.hot).toHaveLength(8);
    expect(r.branches[1]!.detail).toBe('dropped 1 invalid, 2 foreign');
    expect(r.dropped).toEqual({ invalid: 2, foreign: 4 });
  });

  it('skip flags ⇒ skipped and no HTTP request at all', async () => {
    const before = { ...server.stats };
    const r = await retrieve(sources(), req({ skipHot: true, skipCold: true }), relaxed, never());
    expect(r.branches.slice(1)).toEqual([
      { name: 'hot', status: 'skipped', latency_ms: 0, detail: 'skip_hot_memories' },
      { name: 'cold', status: 'skipped', latency_ms: 0, detail: 'skip_cold_memories' },
    ]);
    expect(server.stats.total).toBe(before.total);
    const onlyCold = await retrieve(sources(), req({ skipHot: true }), relaxed, never());
    expect(onlyCold.branches[2]!.status).toBe('success');
    expect(server.stats.hot).toBe(before.hot);
    expect(server.stats.search).toBe(before.search + 1);
  });

  it('blank query ⇒ cold skipped/empty_query, no search call', async () => {
    const before = server.stats.search;
    const r = await retrieve(sources(), req({ query: ' \t\n ' }), relaxed, never());
    expect(r.branches[2]).toEqual({ name: 'cold', status: 'skipped', latency_ms: 0, detail: 'empty_query' });
    expect(r.branches[1]!.status).toBe('success');
    expect(server.stats.search).toBe(before);
  });

  it("the caller's signal aborts every branch", async () => {
    server.setFaults({ latencyMs: 5_000 });
    fakeClock();
    const deadline = new AbortController();
    setTimeout(() => deadline.abort(new DOMException('deadline', 'TimeoutError')), 20);
    const started = performance.now();
    const before = { ...server.stats };
    const p = retrieve(sources(), req(), relaxed, deadline.signal);
    await until(() => server.stats.search > before.search && server.stats.hot > before.hot, 'requests');
    await vi.advanceTimersByTimeAsync(20);
    const r = await p;
    expect(performance.now() - started).toBe(20);
    expect(r.branches[1]).toMatchObject({ status: 'timeout', detail: 'outer_deadline', latency_ms: 20 });
    expect(r.branches[2]).toMatchObject({ status: 'timeout', detail: 'outer_deadline', latency_ms: 20 });
    const cancel = new AbortController();
    setTimeout(() => cancel.abort(), 10);
    const cp = retrieve(sources(), req(), relaxed, cancel.signal);
    await vi.advanceTimersByTimeAsync(10);
    const c = await cp;
    expect(c.branches[1]).toMatchObject({ status: 'error', detail: 'cancelled' });
    vi.useRealTimers();
    // An already-aborted signal makes no call at all.
    const total = server.stats.total;
    const pre = await retrieve(sources(), req(), relaxed, AbortSignal.abort());
    expect(pre.branches.map((b) => b.status)).toEqual(['error', 'error', 'error']);
    expect(server.stats.total).toBe(total);
  });

  it('a wrong token ⇒ HTTP 401, and no token ever appears in the result', async () => {
    const wrong = new HttpMemorySource({
      baseUrl: server.url,
      token: 'secret-wrong-token',
      hotTimeoutMs: 500,
      coldTimeoutMs: 500,
    });
    try {
      const r = await retrieve(bundle(wrong, new EmbeddedDirectiveSource(store)), req(), relaxed, never());
      expect(r.branches[1]).toMatchObject({ status: 'error', detail: 'memory service HTTP 401' });
      const text = JSON.stringify(r);
      expect(text).not.toContain('secret-wrong-token');
      expect(text).not.toContain(TOKEN);
    } finally {
      await wrong.close();
    }
  });

  it('connection refused ⇒ error naming the transport failure', async () => {
    const port = await closedPort();
    const dead = new HttpMemorySource({
      baseUrl: `http://127.0.0.1:${port}`,
      token: TOKEN,
      hotTimeoutMs: 500,
      coldTimeoutMs: 500,
    });
    try {
      const r = await retrieve(bundle(dead, new EmbeddedDirectiveSource(store)), req(), relaxed, never());
      expect(r.branches[1]).toMatchObject({
        status: 'error',
        detail: 'memory service unreachable (ECONNREFUSED)',
      });
    } finally {
      await dead.close();
    }
  });
});

describe('createSources', () => {
  it('uses the memory service when a base URL is set, the embedded store for directives', async () => {
    const settings = loadSettings({
      IBEX_CONTEXT_MEMORY_BASE_URL: `${server.url}/`,
      IBEX_CONTEXT_MEMORY_API_TOKEN: TOKEN,
      IBEX_CONTEXT_EMBEDDED_DB: store.path,
    });
    const before = server.stats.hot;
    const s = await createSources(settings);
    try {
      expect(s.kind).toEqual({ memory: 'http', directive: 'embedded' });
      const r = await retrieve(s, req(), relaxed, never());
      expect(r.branches.map((b) => b.status)).toEqual(['success', 'success', 'success']);
      expect(r.hot).toHaveLength(8);
      expect(r.directive?.version_id).toBe(VERSION);
      expect(server.stats.hot).toBe(before + 1);
    } finally {
      await s.close();
      await s.close();
    }
  });
});

describe('memory wire details against a raw server', () => {
  let raw: http.Server;
  let rawUrl: string;
  let handler: (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void;
  let seen: { method: string; url: string; headers: http.IncomingHttpHeaders; body: string }[];

  beforeAll(async () => {
    raw = http.createServer((rq, rs) => {
      const chunks: Buffer[] = [];
      rq.on('data', (c: Buffer) => chunks.push(c));
      rq.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        seen.push({ method: rq.method!, url: rq.url!, headers: rq.headers, body });
        handler(rq, body, rs);
      });
    });
    await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve));
    rawUrl = `http://127.0.0.1:${(raw.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    raw.closeAllConnections();
    await new Promise<void>((resolve) => raw.close(() => resolve()));
  });

  const call = async (source: HttpMemorySource, query = 'what did "she" say?', t = relaxed) => {
    try {
      return await retrieve(bundle(source, new EmbeddedDirectiveSource(store)), req({ query }), t, never());
    } finally {
      await source.close();
    }
  };
  const client = (over: Partial<ConstructorParameters<typeof HttpMemorySource>[0]> = {}) =>
    new HttpMemorySource({
      baseUrl: `${rawUrl}/prefix/`,
      token: TOKEN,
      hotTimeoutMs: 1000,
      coldTimeoutMs: 1000,
      ...over,
    });

  it('sends the contract.md §4.1 requests exactly', async () => {
    seen = [];
    handler = (_q, _b, rs) => {
      rs.writeHead(200, { 'content-type': 'application/json' });
      rs.end('{"data":{"results":[]}}');
    };
    const r = await call(client());
    expect(r.branches.map((b) => b.status)).toEqual(['success', 'success', 'success']);
    const hot = seen.find((s) => s.method === 'GET')!;
    const cold = seen.find((s) => s.method === 'POST')!;
    expect(hot.url).toBe(`/prefix/v1/memories/hot?agent_id=${AGENT}&limit=20&min_confidence=0.0`);
    expect(hot.headers.authorization).toBe(`Bearer ${TOKEN}`);
    expect(hot.headers.accept).toBe('application/json');
    expect(hot.headers['content-type']).toBeUndefined();
    expect(cold.url).toBe('/prefix/v1/memories/search');
    expect(cold.headers['content-type']).toBe('application/json');
    expect(cold.headers.authorization).toBe(`Bearer ${TOKEN}`);
    expect(cold.body).toBe(
      `{"agent_id":"${AGENT}","query":"what did \\"she\\" say?","limit":10,"min_confidence":0.0}`,
    );
    expect(JSON.parse(cold.body)).toEqual({
      agent_id: AGENT,
      query: 'what did "she" say?',
      limit: 10,
      min_confidence: 0,
    });
  });

  it('a wrong envelope ⇒ error "bad shape: …"', async () => {
    handler = (_q, _b, rs) => {
      rs.writeHead(200, { 'content-type': 'application/json' });
      rs.end('{"data":{"items":[]}}');
    };
    const r = await call(client());
    expect(r.branches[1]).toMatchObject({
      status: 'error',
      detail: 'bad shape: data.results is not an array',
    });
  });

  it('a 50 MB streamed body ⇒ error "response too large", reading stops early', async () => {
    let sent = 0;
    handler = (_q, _b, rs) => {
      rs.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = () => {
        while (sent < 50 * 1024 * 1024) {
          sent += chunk.length;
          if (!rs.write(chunk)) return void rs.once('drain', pump);
        }
        rs.end();
      };
      rs.on('close', () => {});
      pump();
    };
    const r = await call(client({ hotTimeoutMs: 20_000, coldTimeoutMs: 20_000 }), 'x', far);
    // Stopped early: the server never got all 50 MB out (its writes wait on a closed socket).
    expect(sent).toBeLessThan(50 * 1024 * 1024);
    expect(r.branches[1]).toMatchObject({ status: 'error', detail: 'response too large' });
    expect(r.branches[2]).toMatchObject({ status: 'error', detail: 'response too large' });
  });

  it('a declared oversized body is refused from its content-length', async () => {
    handler = (_q, _b, rs) => {
      const body = JSON.stringify({ data: { results: [] }, pad: 'x'.repeat(4096) });
      rs.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      rs.end(body);
    };
    const r = await call(client({ maxResponseBytes: 1024 }));
    expect(r.branches[1]).toMatchObject({ status: 'error', detail: 'response too large' });
  });

  // undici runs headers/body timeouts on its coarse (~1 s) fast timers, so this one takes about a second.
  it("undici's own headers timeout ⇒ hot_http_timeout / cold_http_timeout", async () => {
    handler = () => {}; // never answers
    // The retrieval's own timers are far away, so only undici's can end the branches, however late its
    // coarse timer fires on a loaded machine.
    const r = await call(client({ hotTimeoutMs: 30, coldTimeoutMs: 30 }), 'x', far);
    expect(r.branches[1]).toMatchObject({ status: 'timeout', detail: 'hot_http_timeout' });
    expect(r.branches[2]).toMatchObject({ status: 'timeout', detail: 'cold_http_timeout' });
  });
});

describe('memory-server', () => {
  it('checks the bearer token and parameters', async () => {
    const agent = randomUUID();
    const hot = (headers: Record<string, string>, query = `agent_id=${agent}`) =>
      fetch(`${server.url}/v1/memories/hot?${query}`, { headers });
    expect((await hot({})).status).toBe(401);
    expect((await hot({ authorization: `Bearer ${TOKEN}x` })).status).toBe(401);
    expect((await hot({ authorization: `Basic ${TOKEN}` })).status).toBe(401);
    const ok = await hot({ authorization: `Bearer ${TOKEN}` });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ data: { results: [] } });
    expect((await hot({ authorization: `Bearer ${TOKEN}` }, 'agent_id=nope')).status).toBe(400);
    const empty = await fetch(`${server.url}/v1/memories/search`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ agent_id: agent, query: '  ', limit: 10, min_confidence: 0 }),
    });
    expect(empty.status).toBe(422);
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  it('the CLI rejects bad flags with exit code 2', async () => {
    const errors: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string) => {
      errors.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    try {
      expect(await run(['--port', 'x', '--token', 't'])).toBe(2);
      expect(await run(['--error-rate', '2', '--token', 't'])).toBe(2);
      expect(await run(['--token', ' '])).toBe(2);
    } finally {
      process.stderr.write = write;
    }
    expect(errors.join('')).toContain("--port must be an integer in 0..65535, got 'x'");
    expect(errors.join('')).toContain("--error-rate must be a number in 0..1, got '2'");
  });
});
