/**
 * Memory-service bodies: a raw HTTP server answers the hot and cold calls with
 * fast-check–generated bodies — random JSON, random text, wrong types at every level of the envelope,
 * huge arrays, deep nesting, a mix of the request's own hits with another org's or agent's and with
 * invalid ones, random statuses — and every answer must be OK, at the level the bodies call for, with
 * exactly the dropped counts the bodies call for, and never with a foreign or invalid memory in it.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request, startServiceOverMemory, type TestService, tenant } from '../e2e/harness.js';
import { type Listening, listen, moved, scrape } from './helpers.js';

const ORG = randomUUID();
const AGENT = randomUUID();
const OTHER_ORG = randomUUID();
const OTHER_AGENT = randomUUID();

/** One generated body and what the service must make of it. */
interface Body {
  status: number;
  text: string;
  /** Whether the branch must succeed (status < 400 and a `{data:{results:[…]}}` envelope). */
  success: boolean;
  /** The leading results in order: an own hit's lower-case id, or what else the item is. */
  lead: (string | 'foreign' | 'invalid')[];
  /** Invalid results after `lead`. */
  tail: number;
}

/** What the service must count for `b` when it looks at only the first `limit` items (contract.md §4.1). */
function expected(b: Body, limit: number) {
  const seen = b.lead.slice(0, limit);
  const tailSeen = Math.max(0, Math.min(b.tail, limit - b.lead.length));
  return {
    own: seen.filter((k) => k !== 'foreign' && k !== 'invalid'),
    invalid: seen.filter((k) => k === 'invalid').length + tailSeen,
    foreign: seen.filter((k) => k === 'foreign').length,
    ignored: Math.max(0, b.lead.length + b.tail - limit),
  };
}

const uuid = fc.uuid().map((u) => u.toLowerCase());
const unit = fc.double({ min: 0, max: 1, noNaN: true });

/** A valid item of `org`/`agent`; its content names what it is so that a leak is visible in the text. */
function hit(kind: 'OWN' | 'FOREIGN' | 'INVALID', org: string, agent: string) {
  return fc
    .record({
      id: uuid,
      confidence: unit,
      similarity: unit,
      rank: fc.integer({ min: 1, max: 1000 }),
      category: fc.constantFrom('factual', 'episodic', '', 'weird <category>'),
      text: fc.string({ maxLength: 40 }),
      upper: fc.boolean(),
    })
    .map((h) => ({
      memory: {
        id: h.upper ? h.id.toUpperCase() : h.id,
        // Ids are compared canonically: an upper-case spelling of the request's org is still the org.
        org_id: h.upper ? org.toUpperCase() : org,
        agent_id: agent,
        content: `${kind}-${h.id} ${h.text}`,
        category: h.category,
        confidence: h.confidence,
        extra: { ignored: [1, 2, 3] },
      },
      similarity: h.similarity,
      rank: h.rank,
      source: 'fuzz',
    }));
}

type Item = { kind: 'own' | 'foreign' | 'invalid'; value: unknown };

/** Breaks one rule of contract.md §4.1 in an otherwise valid own item. */
/** An item as generated, loosely typed so that a breaker can put any value anywhere. */
type LooseItem = { [key: string]: unknown; memory: { [key: string]: unknown } };

const breakers: ((h: LooseItem) => void)[] = [
  (h) => (h.similarity = 1.5),
  (h) => (h.similarity = -0.01),
  (h) => (h.similarity = '0.5'),
  (h) => (h.similarity = null),
  (h) => (h.rank = 0),
  (h) => (h.rank = 2.5),
  (h) => (h.rank = '1'),
  (h) => (h.source = 7),
  (h) => delete h.source,
  (h) => (h.memory.id = 'not-a-uuid'),
  (h) => (h.memory.org_id = 42),
  (h) => (h.memory.agent_id = null),
  (h) => (h.memory.content = ['INVALID-array']),
  (h) => (h.memory.content = { text: 'INVALID-object' }),
  (h) => (h.memory.category = false),
  (h) => (h.memory.confidence = 2),
  (h) => (h.memory.confidence = 'high'),
  (h) => Object.assign(h, { memory: 'INVALID-string memory' }),
  (h) => Object.assign(h, { memory: null }),
];

const item: fc.Arbitrary<Item> = fc.oneof(
  { weight: 4, arbitrary: hit('OWN', ORG, AGENT).map((value) => ({ kind: 'own' as const, value })) },
  {
    weight: 2,
    arbitrary: fc
      .oneof(
        hit('FOREIGN', OTHER_ORG, AGENT),
        hit('FOREIGN', ORG, OTHER_AGENT),
        hit('FOREIGN', OTHER_ORG, OTHER_AGENT),
      )
      .map((value) => ({ kind: 'foreign' as const, value })),
  },
  {
    weight: 2,
    arbitrary: fc
      .tuple(hit('INVALID', ORG, AGENT), fc.integer({ min: 0, max: breakers.length - 1 }))
      .map(([h, b]) => {
        breakers[b]!(h as unknown as LooseItem);
        return { kind: 'invalid' as const, value: h };
      }),
  },
  // Anything at all where an item should be: never valid, so always counted invalid.
  {
    weight: 2,
    arbitrary: fc.jsonValue({ maxDepth: 3 }).map((value) => ({ kind: 'invalid' as const, value })),
  },
);

/** `depth` nested arrays around `inner`: built as text, the generator would recurse too deep. */
const nested = (depth: number, inner = '0') => `${'['.repeat(depth)}${inner}${']'.repeat(depth)}`;

/** Bodies in the `{data:{results:[…]}}` envelope, with counts known by construction. */
const envelope: fc.Arbitrary<Body> = fc
  .record({
    items: fc.array(item, { maxLength: 25 }),
    // Huge arrays: padding items (each invalid) appended as text.
    padding: fc.oneof(
      { weight: 5, arbitrary: fc.constant(0) },
      { weight: 1, arbitrary: fc.integer({ min: 1000, max: 200_000 }) },
    ),
    pad: fc.constantFrom('0', 'null', '{}', '[]', '"x"', '{"memory":{}}', 'true'),
    // Deep nesting inside one item.
    deep: fc.oneof(
      { weight: 5, arbitrary: fc.constant(0) },
      { weight: 1, arbitrary: fc.integer({ min: 1, max: 100_000 }) },
    ),
    extraKeys: fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
  })
  .map(({ items, padding, pad, deep, extraKeys }) => {
    const parts = items.map((i) => JSON.stringify(i.value));
    if (deep > 0) parts.push(nested(deep));
    if (padding > 0) parts.push(Array(padding).fill(pad).join(','));
    const extra = Object.keys(extraKeys).filter((k) => k !== 'data');
    const head = extra.length
      ? `${JSON.stringify(Object.fromEntries(extra.map((k) => [k, extraKeys[k]]))).slice(0, -1)},`
      : '{';
    const lead = items.map((i) =>
      i.kind === 'own' ? (i.value as { memory: { id: string } }).memory.id.toLowerCase() : i.kind,
    );
    return {
      status: 200,
      text: `${head}"data":{"results":[${parts.join(',')}]}}`,
      success: true,
      lead,
      tail: padding + (deep > 0 ? 1 : 0),
    };
  });

/** Whether parsed JSON is the envelope (contract.md §4.1): written independently of the service's check. */
function isEnvelope(v: unknown): boolean {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const data = (v as { data?: unknown }).data;
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return false;
  return Array.isArray((data as { results?: unknown }).results);
}

function other(text: string, statusCode = 200): Body {
  let parsed: unknown;
  let ok = false;
  try {
    parsed = JSON.parse(text);
    ok = true;
  } catch {
    // invalid JSON
  }
  const results =
    ok && isEnvelope(parsed) ? ((parsed as { data: { results: unknown[] } }).data.results ?? []) : [];
  return {
    status: statusCode,
    text,
    success: statusCode < 400 && ok && isEnvelope(parsed),
    lead: [],
    tail: results.length,
  };
}

/** Everything else: random JSON, wrong types in the envelope, deep nesting, text, error statuses. */
const hostile: fc.Arbitrary<Body> = fc.oneof(
  fc.jsonValue().map((v) => other(JSON.stringify(v) ?? 'null')),
  fc.string({ maxLength: 200 }).map((s) => other(s)),
  fc.string({ unit: 'binary', maxLength: 200 }).map((s) => other(s)),
  fc.anything({ maxDepth: 3 }).map((v) => other(JSON.stringify({ data: { results: v } }) ?? '')),
  fc.anything({ maxDepth: 3 }).map((v) => other(JSON.stringify({ data: v }) ?? '')),
  fc.integer({ min: 1, max: 200_000 }).map((d) => other(nested(d))),
  fc.integer({ min: 1, max: 200_000 }).map((d) => other(`{"data":{"results":${nested(d, '')}}}`)),
  fc.integer({ min: 1, max: 100_000 }).map((d) => other(`${'{"a":'.repeat(d)}1${'}'.repeat(d)}`)),
  fc.integer({ min: 1, max: 100_000 }).map((d) => other(`${'['.repeat(d)}`)),
  fc
    .tuple(fc.constantFrom(400, 401, 404, 409, 422, 429, 500, 502, 503), envelope)
    .map(([code, b]) => ({ ...b, status: code, success: false, lead: [], tail: 0 })),
);

const body: fc.Arbitrary<Body> = fc.oneof(
  { weight: 3, arbitrary: envelope },
  { weight: 2, arbitrary: hostile },
);

describe('random memory-service bodies', () => {
  let server: Listening;
  let svc: TestService;
  const current: { hot: Body; cold: Body } = {
    hot: other('{"data":{"results":[]}}'),
    cold: other('{"data":{"results":[]}}'),
  };

  beforeAll(async () => {
    server = await listen(
      http.createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          const b = req.url?.startsWith('/v1/memories/hot') ? current.hot : current.cold;
          res.writeHead(b.status, { 'content-type': 'application/json' });
          res.end(b.text);
        });
      }),
    );
    // Generous: a 200 000-item body takes tens of ms to parse on a busy machine; the level is what is
    // checked here, not the wall.
    svc = await startServiceOverMemory(server.url, 'fuzz-token', [8000, 5000]);
  });
  afterAll(async () => {
    await Promise.all([svc?.stop(), server?.close()]);
  });

  it('every answer is OK, at the level the bodies call for, with no foreign or invalid memory', async () => {
    const t = { org: ORG, agent: AGENT };
    let runs = 0;
    const before = await scrape(svc.service.adminUrl);
    let dropped = { invalid: 0, foreign: 0, ignored: 0 };
    const limits = [20, 10];
    await fc.assert(
      fc.asyncProperty(body, body, async (hot, cold) => {
        runs++;
        current.hot = hot;
        current.cold = cold;
        const r = await svc.client.assemble(request(t));
        expect(r.status.code, r.status.details).toBe(status.OK);
        const res = r.response!;
        const successes = [hot, cold].filter((b) => b.success).length;
        expect(res.degradation.level).toBe(['L2', 'L1', 'L0'][successes]);
        const own = new Set<string>();
        for (const [i, b] of [hot, cold].entries()) {
          const branch = res.degradation.branches[i + 1]!;
          if (!b.success) {
            expect(branch.status).toBe('error');
            continue;
          }
          expect(branch.status).toBe('success');
          // Items past the limit (20 hot, 10 cold) are ignored and counted, never validated.
          const e = expected(b, limits[i]!);
          const parts: string[] = [];
          if (e.invalid > 0) parts.push(`${e.invalid} invalid`);
          if (e.foreign > 0) parts.push(`${e.foreign} foreign`);
          const droppedText = parts.length ? `dropped ${parts.join(', ')}` : '';
          const ignoredText = e.ignored > 0 ? `ignored ${e.ignored} past limit` : '';
          expect(branch.detail).toBe([droppedText, ignoredText].filter(Boolean).join('; '));
          dropped = {
            invalid: dropped.invalid + e.invalid,
            foreign: dropped.foreign + e.foreign,
            ignored: dropped.ignored + e.ignored,
          };
          for (const id of e.own) own.add(id);
        }
        // Only the request's own valid hits can be used, and nothing foreign or invalid is in the text.
        for (const m of res.memories_used) expect(own.has(m.memory_id)).toBe(true);
        expect(res.memories_included).toBeLessThanOrEqual(own.size);
        expect(res.assembled_context).not.toContain('FOREIGN-');
        expect(res.assembled_context).not.toContain('INVALID-');
      }),
      { numRuns: 100, seed: Number(process.env.FC_SEED ?? Date.now() % 2 ** 31), endOnFailure: true },
    );
    expect(runs).toBe(100);

    // The process keeps serving normally, and counted every dropped hit.
    current.hot = other('{"data":{"results":[]}}');
    current.cold = other('{"data":{"results":[]}}');
    const r = await svc.client.assemble(request(tenant()));
    expect(r.response!.degradation.level).toBe('L0');
    const after = await scrape(svc.service.adminUrl);
    expect(moved(before, after, 'ibex_context_dropped_hits_total', { reason: 'invalid' })).toBe(
      dropped.invalid,
    );
    expect(moved(before, after, 'ibex_context_dropped_hits_total', { reason: 'foreign' })).toBe(
      dropped.foreign,
    );
    expect(moved(before, after, 'ibex_context_dropped_hits_total', { reason: 'past_limit' })).toBe(
      dropped.ignored,
    );
  });
});
