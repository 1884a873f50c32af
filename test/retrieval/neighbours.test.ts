import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import * as neighbours from '../../src/retrieval/neighbours.js';
import type { MemoryRow } from '../../src/retrieval/sqlite/embedded-store.js';
import { PooledStoreReads } from '../../src/retrieval/sqlite/store-reader.js';
import { contentText } from '../../src/text/content-bytes.js';
import { useTempStore } from './fixtures.js';

const ORG = randomUUID();
const OTHER_ORG = randomUUID();
const AGENT = randomUUID();
const OTHER_AGENT = randomUUID();
const T0 = Date.UTC(2024, 0, 1);

const fx = useTempStore();

/** A turn of a conversation, `i` seconds into it. */
function turn(org: string, agent: string, i: number, content: string, category = 'episodic'): MemoryRow {
  return {
    id: randomUUID(),
    org_id: org,
    agent_id: agent,
    content,
    category,
    confidence: 0.8,
    created_at: T0 + i * 1000,
  };
}

const xOf = (s: number) => s / (1 - s);

describe('mergeNeighbours', () => {
  const row = (id: string, content: string | null = 'a statement') => ({ id, content });

  it('gives a neighbour its share of its hit, keeps the higher x of a memory found twice, cuts to the limit', () => {
    const hits = [
      { row: row('a', 'What did you paint?'), x: 4 },
      { row: row('b'), x: 2 },
      { row: row('c'), x: 1 },
    ];
    const merged = neighbours.mergeNeighbours(
      hits,
      [
        { row: row('n'), parent: 0, next: true },
        { row: row('p'), parent: 0, next: false },
        { row: row('c'), parent: 1, next: true },
        { row: row('b'), parent: 0, next: false },
      ],
      4,
    );
    expect(merged.map((h) => [h.row.id, h.x])).toEqual([
      ['a', 4],
      ['n', neighbours.ANSWER_DISCOUNT * 4],
      ['b', neighbours.PREVIOUS_DISCOUNT * 4],
      ['p', neighbours.PREVIOUS_DISCOUNT * 4],
    ]);
  });

  it('without neighbours is the hits, cut to the limit', () => {
    const hits = [
      { row: row('a'), x: 3 },
      { row: row('b'), x: 2 },
    ];
    expect(neighbours.mergeNeighbours(hits, [], 1)).toEqual([hits[0]]);
    expect(neighbours.mergeNeighbours(hits, [{ row: row('n'), parent: 1, next: true }], 5).at(-1)).toEqual({
      row: row('n'),
      x: neighbours.NEXT_DISCOUNT * 2,
    });
  });

  it('a question mark, ASCII or full-width, makes a question; an oversize row never does', () => {
    expect(neighbours.asksQuestion('How long have you been married?')).toBe(true);
    expect(neighbours.asksQuestion('你结婚多久了？')).toBe(true);
    expect(neighbours.asksQuestion('5 years already!')).toBe(false);
    expect(neighbours.asksQuestion(null)).toBe(false);
  });
});

describe('EmbeddedStore search with neighbours (contract.md §4.3)', () => {
  function conversation(): void {
    fx.store.upsertMemories([
      turn(ORG, AGENT, 0, 'Caroline: I went to a pottery class.'),
      turn(ORG, AGENT, 1, 'Melanie: How long have you been married?'),
      turn(ORG, AGENT, 2, 'Caroline: 5 years already!'),
      turn(ORG, AGENT, 3, 'Melanie: Lovely.'),
      turn(ORG, AGENT, 4, 'A session summary about the wedding', 'factual'),
      // Other tenants' rows between and around the turns: never neighbours.
      turn(OTHER_ORG, AGENT, 1.5, 'secret of another org'),
      turn(ORG, OTHER_AGENT, 2.5, 'secret of another agent'),
      turn(OTHER_ORG, AGENT, 0.5, 'secret before'),
    ]);
  }

  it('the plain search is unchanged: only memories sharing a term', () => {
    conversation();
    const hits = fx.store.search(ORG, AGENT, 'How long married?');
    expect(hits.map((h) => h.memory.content)).toEqual(['Melanie: How long have you been married?']);
  });

  it('adds the answer after a question hit and the turn before it, in the search scope and category', () => {
    conversation();
    const plain = fx.store.search(ORG, AGENT, 'How long married?');
    const hits = fx.store.search(ORG, AGENT, 'How long married?', { neighbours: 5 });
    expect(hits.map((h) => h.memory.content)).toEqual([
      'Melanie: How long have you been married?',
      'Caroline: 5 years already!',
      'Caroline: I went to a pottery class.',
    ]);
    expect(hits.map((h) => h.rank)).toEqual([1, 2, 3]);
    expect(hits.every((h) => h.memory.org_id === ORG && h.memory.agent_id === AGENT)).toBe(true);
    expect(hits.every((h) => h.source === 'fts')).toBe(true);
    const x = xOf(plain[0]!.similarity);
    expect(xOf(hits[0]!.similarity)).toBeCloseTo(x, 12);
    expect(xOf(hits[1]!.similarity)).toBeCloseTo(neighbours.ANSWER_DISCOUNT * x, 12);
    expect(xOf(hits[2]!.similarity)).toBeCloseTo(neighbours.PREVIOUS_DISCOUNT * x, 12);
  });

  it('the limit holds with neighbours; a confidence floor applies to them; a bad count is refused', () => {
    conversation();
    expect(fx.store.search(ORG, AGENT, 'How long married?', { neighbours: 5, limit: 2 })).toHaveLength(2);
    expect(fx.store.search(ORG, AGENT, 'How long married?', { neighbours: 5, minConfidence: 0.9 })).toEqual(
      [],
    );
    expect(() => fx.store.search(ORG, AGENT, 'married', { neighbours: 21 })).toThrow(/neighbours/);
    expect(() => fx.store.search(ORG, AGENT, 'married', { neighbours: 1.5 })).toThrow(/neighbours/);
  });

  it('the memory wire (every org of the agent) reads neighbours across its orgs only', () => {
    conversation();
    const hits = fx.store.search(null, AGENT, 'pottery', { neighbours: 1 });
    expect(hits.map((h) => h.memory.content)).toEqual([
      'Caroline: I went to a pottery class.',
      'secret before',
    ]);
    expect(hits.every((h) => h.memory.agent_id === AGENT)).toBe(true);
  });

  it('store-read threads search with the neighbours they were started with, validated and scoped', async () => {
    conversation();
    const reads = await PooledStoreReads.start(fx.file, 1, undefined, undefined, 5);
    try {
      const answer = await reads.search(ORG, AGENT, 'How long married?');
      expect('hits' in answer).toBe(true);
      const hits = 'hits' in answer ? answer.hits : [];
      expect(hits.map((h) => contentText(h.content))).toEqual([
        'Melanie: How long have you been married?',
        'Caroline: 5 years already!',
        'Caroline: I went to a pottery class.',
      ]);
    } finally {
      await reads.close();
    }
  });
});
