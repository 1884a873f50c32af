/**
 * Regression tests over real gRPC on loopback and a real node:http memory service: a
 * memory service that answers `limit=20` with 5,000 hits, 20 hot memories of 300 KB HTML, a body past
 * the cap, and code-point-exact oversize memories. Each test asserts the heavy call's outcome AND that a
 * concurrent small caller of another org stays L0, OK, within its (generous) deadline.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { maxBodyBytes } from '../../src/retrieval/validate.js';
import type { AssembleContextResponse } from '../../src/wire/proto.js';
import { type Listening, listen, moved, scrape } from '../faults/helpers.js';
import { request, startServiceOverMemory, type TestService, tenant } from './harness.js';

type Tenant = { org: string; agent: string };

/** One memory-service result item of `t`; `id` defaults to a fresh UUID. */
function item(t: Tenant, content: string, rank: number, id: string = randomUUID()) {
  return {
    memory: { id, org_id: t.org, agent_id: t.agent, content, category: 'factual', confidence: 0.5 },
    similarity: 0.9 - rank / 100_000,
    rank,
    source: 'fixture',
  };
}

const envelope = (items: unknown[]) => Buffer.from(JSON.stringify({ data: { results: items } }));

/** Bodies by agent id; an agent not listed gets an empty result list. Bodies are built once, up front. */
const bodies = new Map<string, { hot: Buffer; cold: Buffer }>();
const EMPTY = envelope([]);

/** The concurrent small caller: two small memories of its own, hot and cold. */
const QUIET = tenant();
const quietIds = { hot: randomUUID(), cold: randomUUID() };
bodies.set(QUIET.agent, {
  hot: envelope([item(QUIET, 'quiet hot memory about sailing', 1, quietIds.hot)]),
  cold: envelope([item(QUIET, 'quiet cold memory about the lake', 1, quietIds.cold)]),
});

/** Quiet calls, one after another, for as long as `heavy` runs (at least three): all must be L0. */
async function quietDuring(svc: TestService, heavy: Promise<unknown>) {
  let done = false;
  void heavy.finally(() => {
    done = true;
  });
  const outcomes: { code: number; level: string | undefined; ids: string[] }[] = [];
  while (!done || outcomes.length < 3) {
    const r = await svc.client.assemble(request(QUIET), { deadlineMs: 3000 });
    outcomes.push({
      code: r.status.code,
      level: r.response?.degradation.level,
      ids: r.response?.memories_used.map((m) => m.memory_id).sort() ?? [],
    });
  }
  return outcomes;
}

function expectQuietL0(outcomes: Awaited<ReturnType<typeof quietDuring>>) {
  for (const o of outcomes) {
    expect(o.code).toBe(status.OK);
    expect(o.level).toBe('L0');
    expect(o.ids).toEqual([quietIds.hot, quietIds.cold].sort());
  }
}

/**
 * Assembles for `heavy` while the quiet org calls alongside ({@link quietDuring}): the heavy call must be
 * OK (at `level` when given) and every quiet call OK at L0 with its own memories.
 * @returns the heavy answer and the service's /metrics before and after it.
 */
async function assembleBeside(svc: TestService, heavy: { org: string; agent: string }, level?: string) {
  const before = await scrape(svc.service.adminUrl);
  const call = svc.client.assemble(request(heavy), { deadlineMs: 5000 });
  const quiet = await quietDuring(svc, call);
  const r = await call;
  expect(r.status.code, r.status.details).toBe(status.OK);
  const res = r.response as AssembleContextResponse;
  if (level !== undefined) expect(res.degradation.level).toBe(level);
  expectQuietL0(quiet);
  return { res, before, after: await scrape(svc.service.adminUrl) };
}

describe('bounded memory-service answers, with a concurrent quiet org', () => {
  let server: Listening;
  let svc: TestService;

  beforeAll(async () => {
    server = await listen(
      http.createServer((req, res) => {
        const url = new URL(req.url ?? '/', 'http://x');
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          const hot = url.pathname === '/v1/memories/hot';
          const agent = hot
            ? url.searchParams.get('agent_id')
            : (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { agent_id: string }).agent_id;
          const b = bodies.get(agent ?? '');
          const body = b ? (hot ? b.hot : b.cold) : EMPTY;
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
          res.end(body);
        });
      }),
    );
    // Generous: outcomes are under test, not speed; the suite must pass on a loaded machine.
    svc = await startServiceOverMemory(server.url, 'bounds-token', [5000, 2000]);
  });
  afterAll(async () => {
    await Promise.all([svc?.stop(), server?.close()]);
  });

  it('IBEX_CONTEXT_MAX_MEMORY_CHARS=1000 lowers both caps: 1,001-char memory oversize, a 300 KB body too large', async () => {
    const small = await startServiceOverMemory(server.url, 'bounds-token', [5000, 2000], {
      IBEX_CONTEXT_MAX_MEMORY_CHARS: '1000',
    });
    try {
      const heavy = tenant();
      const kept = item(heavy, 'k'.repeat(1000), 1);
      const cold = [kept, item(heavy, 'o'.repeat(1001), 2)];
      // Cold cap with 1,000 chars: 1,024 + 10 × (6,000 + 4,096) = 101,984 bytes; hot gets 300 KB.
      const hot = Array.from({ length: 20 }, (_, i) => item(heavy, 'h'.repeat(15_000), i + 1));
      bodies.set(heavy.agent, { hot: envelope(hot), cold: envelope(cold) });
      expect(bodies.get(heavy.agent)!.hot.length).toBeGreaterThan(maxBodyBytes(20, 1000));
      const r = await small.client.assemble(request(heavy), { deadlineMs: 5000 });
      expect(r.status.code, r.status.details).toBe(status.OK);
      const res = r.response as AssembleContextResponse;
      expect(res.degradation.branches[1]).toMatchObject({ status: 'error', detail: 'response too large' });
      expect(res.degradation.branches[2]).toMatchObject({ status: 'success', detail: 'dropped 1 oversize' });
      expect(res.memories_used.map((m) => m.memory_id)).toEqual([kept.memory.id]);
    } finally {
      await small.stop();
    }
  });

  it('5,000 hits for limit=20: only the first 20 hot / 10 cold are looked at, the rest counted; L0', async () => {
    const heavy = tenant();
    const hot = Array.from({ length: 5000 }, (_, i) => item(heavy, `hot memory ${i} about sailing`, i + 1));
    const cold = Array.from({ length: 5000 }, (_, i) => item(heavy, `cold memory ${i} on the lake`, i + 1));
    bodies.set(heavy.agent, { hot: envelope(hot), cold: envelope(cold) });
    const { res, before, after } = await assembleBeside(svc, heavy, 'L0');
    expect(res.degradation.branches[1]).toMatchObject({
      status: 'success',
      detail: 'ignored 4980 past limit',
    });
    expect(res.degradation.branches[2]).toMatchObject({
      status: 'success',
      detail: 'ignored 4990 past limit',
    });
    const allowed = new Set([...hot.slice(0, 20), ...cold.slice(0, 10)].map((h) => h.memory.id));
    expect(res.memories_used).toHaveLength(30);
    for (const m of res.memories_used) expect(allowed.has(m.memory_id)).toBe(true);
    expect(moved(before, after, 'ibex_context_dropped_hits_total', { reason: 'past_limit' })).toBe(9970);
  });

  it('20 hot memories of 300 KB HTML: dropped as oversize and counted; cold kept; L0', async () => {
    const heavy = tenant();
    const html = `<div class=memo><p>${'<b>bold</b> &amp; <i>markup</i> '.repeat(10_000)}</p></div>`;
    expect(html.length).toBeGreaterThan(300_000);
    const hot = Array.from({ length: 20 }, (_, i) => item(heavy, `${i} ${html}`, i + 1));
    const cold = [item(heavy, 'a small cold memory', 1), item(heavy, 'another small one', 2)];
    bodies.set(heavy.agent, { hot: envelope(hot), cold: envelope(cold) });
    expect(bodies.get(heavy.agent)!.hot.length).toBeLessThan(maxBodyBytes(20, 65_536));
    const { res, before, after } = await assembleBeside(svc, heavy, 'L0');
    expect(res.degradation.branches[1]).toMatchObject({ status: 'success', detail: 'dropped 20 oversize' });
    expect(res.memories_used.map((m) => m.memory_id).sort()).toEqual(cold.map((c) => c.memory.id).sort());
    expect(res.assembled_context).not.toContain('<b>bold</b>');
    expect(moved(before, after, 'ibex_context_dropped_hits_total', { reason: 'oversize' })).toBe(20);
  });

  it('a body past the cap derived from limit=20: hot error `response too large`, L1', async () => {
    const heavy = tenant();
    const big = 'x'.repeat(400_000);
    const hot = Array.from({ length: 20 }, (_, i) => item(heavy, big, i + 1));
    bodies.set(heavy.agent, { hot: envelope(hot), cold: envelope([item(heavy, 'small cold', 1)]) });
    expect(bodies.get(heavy.agent)!.hot.length).toBeGreaterThan(maxBodyBytes(20, 65_536));
    const { res } = await assembleBeside(svc, heavy, 'L1');
    expect(res.degradation.branches[1]).toMatchObject({ status: 'error', detail: 'response too large' });
    expect(res.memories_used).toHaveLength(1);
  });

  it('the memory cap counts code points: 65,536 emoji kept, 65,537 dropped as oversize', async () => {
    const heavy = tenant();
    const atCap = item(heavy, '😀'.repeat(65_536), 1);
    const overCap = item(heavy, '😀'.repeat(65_537), 2);
    bodies.set(heavy.agent, { hot: envelope([atCap, overCap]), cold: EMPTY });
    const { res } = await assembleBeside(svc, heavy);
    expect(res.degradation.branches[1]).toMatchObject({ status: 'success', detail: 'dropped 1 oversize' });
    expect(res.memories_used.map((m) => m.memory_id)).toEqual([atCap.memory.id]);
  });
});
