import { randomUUID } from 'node:crypto';
import { MessageChannel, receiveMessageOnPort } from 'node:worker_threads';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isPackedHits, packHits, unpackHits } from '../../../src/retrieval/sqlite/packed-hits.js';
import type { ValidatedHits } from '../../../src/retrieval/validate.js';
import { contentText } from '../../../src/text/content-bytes.js';
import type { MemoryHit } from '../../../src/wire/types.js';

const ORG = randomUUID();
const AGENT = randomUUID();

/** Through a real MessagePort with the transfer list, as a store-read thread's answer travels. */
function postAndReceive<T>(value: T, transfer: ArrayBuffer[]): T {
  const { port1, port2 } = new MessageChannel();
  port1.postMessage(value, transfer);
  const got = receiveMessageOnPort(port2)!.message as T;
  port1.close();
  port2.close();
  return got;
}

const hitArb = fc.record(
  {
    content: fc.string({ unit: 'binary', maxLength: 80 }),
    category: fc.constantFrom('factual', 'episodic', 'preference', 'ünïcode'),
    confidence: fc.double({ min: 0, max: 1, noNaN: true }),
    similarity: fc.double({ min: 0, max: 1, noNaN: true }),
    created: fc.option(fc.integer({ min: 0, max: 2 ** 43 }), { nil: undefined }),
    usefulness: fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: undefined }),
    inclusions: fc.option(fc.nat(), { nil: undefined }),
  },
  { requiredKeys: ['content', 'category', 'confidence', 'similarity'] },
);

type HitFields = typeof hitArb extends fc.Arbitrary<infer T> ? T : never;

function hitOf(h: HitFields, rank: number): MemoryHit {
  const hit: MemoryHit = {
    memory_id: randomUUID(),
    org_id: ORG,
    agent_id: AGENT,
    content: h.content,
    category: h.category,
    confidence: h.confidence,
    similarity: h.similarity,
    rank,
    source: 'fts',
  };
  if (h.created !== undefined) hit.created_at_ms = h.created;
  if (h.usefulness !== undefined) hit.usefulness = h.usefulness;
  if (h.inclusions !== undefined) hit.inclusions = h.inclusions;
  return hit;
}

describe('search hits in columns (store-read thread → event loop)', () => {
  it('arrive equal to the hits sent, contents as UTF-8 bytes, counts kept (property)', () => {
    fc.assert(
      fc.property(fc.array(hitArb, { maxLength: 40 }), fc.nat(5), (raw, foreign) => {
        const sent: ValidatedHits = {
          hits: raw.map((h, i) => hitOf(h, i + 1)),
          invalid: 0,
          foreign,
          oversize: 1,
          ignored: 2,
        };
        const transfer: ArrayBuffer[] = [];
        const packed = packHits(sent, transfer);
        expect(packed).not.toBeNull();
        expect(transfer).toHaveLength(1);
        const got = postAndReceive(packed!, transfer);
        expect(isPackedHits(got)).toBe(true);
        const back = unpackHits(got);
        expect({ ...back, hits: [] }).toEqual({ ...sent, hits: [] });
        expect(back.hits.map((h) => ({ ...h, content: contentText(h.content) }))).toEqual(sent.hits);
        for (const h of back.hits) expect(h.content).toBeInstanceOf(Uint8Array);
      }),
      { numRuns: 200 },
    );
  });

  it('are not packed when a hit is of another org, agent or source: the caller sends them as they are', () => {
    const base = hitOf({ content: 'a', category: 'factual', confidence: 1, similarity: 0.5 }, 1);
    for (const other of [{ org_id: randomUUID() }, { agent_id: randomUUID() }, { source: 'hot' }]) {
      const hits = [base, { ...base, ...other, rank: 2 }];
      expect(packHits({ hits, invalid: 0, foreign: 0, oversize: 0, ignored: 0 }, [])).toBeNull();
    }
    expect(isPackedHits([])).toBe(false);
    expect(isPackedHits({ hits: [] })).toBe(false);
  });
});
