import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseDirectiveObject, parseDirectiveValue } from '../../src/retrieval/directive.js';
import {
  droppedDetail,
  exceedsCodePoints,
  unwrapMemoryResponse,
  validateHit,
  validateHits,
} from '../../src/retrieval/validate.js';
import { bytesInPlace, utf8ExceedsCodePoints } from '../../src/text/content-bytes.js';
import { toFtsQuery } from '../../src/text/fts-query.js';
import { uuidV5 } from '../../src/util/uuid.js';

const ORG = '7c9e6679-7425-40de-944b-e07fc1f90ae7';
const AGENT = 'a3bb189e-8bf9-3888-9912-ace4e6543002';

function item(
  over: Record<string, unknown> = {},
  memOver: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    memory: {
      id: '2a6c9d1e-0b3f-4c5d-8e7f-9a0b1c2d3e4f',
      org_id: ORG,
      agent_id: AGENT,
      content: 'likes tea',
      category: 'preference',
      confidence: 0.8,
      created_at: '2024-01-01T00:00:00Z',
      ...memOver,
    },
    similarity: 0.6,
    rank: 1,
    source: 'vector',
    ...over,
  };
}

describe('validateHit (contract.md §4.1)', () => {
  it('maps a valid item to a MemoryHit with lower-cased ids', () => {
    const hit = validateHit(
      item({}, { id: '2A6C9D1E-0B3F-4C5D-8E7F-9A0B1C2D3E4F', org_id: ORG.toUpperCase() }),
    );
    expect(hit).toEqual({
      memory_id: '2a6c9d1e-0b3f-4c5d-8e7f-9a0b1c2d3e4f',
      org_id: ORG,
      agent_id: AGENT,
      content: 'likes tea',
      category: 'preference',
      confidence: 0.8,
      similarity: 0.6,
      rank: 1,
      source: 'vector',
      created_at_ms: Date.parse('2024-01-01T00:00:00Z'),
    });
  });

  it('accepts the bounds 0 and 1 and an empty content', () => {
    expect(validateHit(item({ similarity: 0 }, { confidence: 1, content: '' }))?.similarity).toBe(0);
    expect(validateHit(item({ similarity: 1 }, { confidence: 0 }))?.confidence).toBe(0);
  });

  it.each([
    ['not an object', 'x'],
    ['null', null],
    ['memory missing', { similarity: 0.5, rank: 1, source: 's' }],
    ['bad id', item({}, { id: 'not-a-uuid' })],
    ['numeric id', item({}, { id: 42 })],
    ['bad org', item({}, { org_id: `${ORG}x` })],
    ['bad agent', item({}, { agent_id: '' })],
    ['content not a string', item({}, { content: 5 })],
    ['category missing', item({}, { category: undefined })],
    ['source missing', item({ source: undefined })],
    ['confidence > 1', item({}, { confidence: 1.0000001 })],
    ['confidence < 0', item({}, { confidence: -0.1 })],
    ['confidence NaN', item({}, { confidence: Number.NaN })],
    ['confidence as text', item({}, { confidence: '0.5' })],
    ['similarity > 1', item({ similarity: 1.5 })],
    ['similarity Infinity', item({ similarity: Number.POSITIVE_INFINITY })],
    ['rank 0', item({ rank: 0 })],
    ['rank fractional', item({ rank: 1.5 })],
    ['rank text', item({ rank: '1' })],
  ])('drops an item with %s', (_name, raw) => {
    expect(validateHit(raw)).toBeNull();
  });
});

describe('validateHits', () => {
  it('keeps order, drops invalid and foreign items and counts them', () => {
    const otherOrg = randomUUID();
    const otherAgent = randomUUID();
    const items = [
      item({ rank: 1 }, { id: randomUUID(), content: 'a' }),
      item({ rank: 2, similarity: 7 }),
      item({ rank: 3 }, { id: randomUUID(), org_id: otherOrg }),
      item({ rank: 4 }, { id: randomUUID(), content: 'b' }),
      item({ rank: 5 }, { id: randomUUID(), agent_id: otherAgent }),
      // Invalid AND foreign counts once, as invalid.
      item({ rank: 0 }, { org_id: otherOrg }),
    ];
    const out = validateHits(items, ORG.toUpperCase(), AGENT);
    expect(out.hits.map((h) => h.content)).toEqual(['a', 'b']);
    expect(out.hits.map((h) => h.rank)).toEqual([1, 4]);
    expect(out.invalid).toBe(2);
    expect(out.foreign).toBe(2);
  });

  it('keeps a content a store-read thread sent as UTF-8 bytes, and bounds it in code points', () => {
    const bytes = (text: string) => new Uint8Array(Buffer.from(text));
    const items = [
      item({ rank: 1 }, { id: randomUUID(), content: bytes('湖湖湖') }),
      item({ rank: 2 }, { id: randomUUID(), content: bytes('湖湖湖湖') }),
      item({ rank: 3 }, { id: randomUUID(), content: bytes('a😀c') }),
      item({ rank: 4 }, { id: randomUUID(), content: [1, 2] }),
    ];
    const out = validateHits(items, ORG, AGENT, { limit: 20, maxChars: 3 });
    expect(out.hits.map((h) => Buffer.from(h.content as Uint8Array).toString())).toEqual(['湖湖湖', 'a😀c']);
    expect(out).toMatchObject({ oversize: 1, invalid: 1 });
  });

  it('counts UTF-8 code points exactly as the string check counts them (property)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 40 }), fc.nat(45), (text, max) => {
        // Buffer.from writes a lone surrogate as U+FFFD: one code point either way.
        expect(utf8ExceedsCodePoints(Buffer.from(text), max)).toBe(exceedsCodePoints(text, max));
      }),
      { numRuns: 500 },
    );
  });

  it('bytesInPlace: every string content becomes a view on one buffer, byte-exact, nulls and bytes kept', () => {
    const already = new Uint8Array([104, 105]);
    const holders: { content: string | Uint8Array | null }[] = [
      { content: 'tea <b>' },
      { content: null },
      { content: already },
      { content: '湖 😀' },
    ];
    const buffer = bytesInPlace(holders);
    expect(buffer?.byteLength).toBe(Buffer.byteLength('tea <b>湖 😀'));
    expect(
      holders.map((h) => (h.content instanceof Uint8Array ? Buffer.from(h.content).toString() : h.content)),
    ).toEqual(['tea <b>', null, 'hi', '湖 😀']);
    expect((holders[0]!.content as Uint8Array).buffer).toBe(buffer);
    expect((holders[3]!.content as Uint8Array).buffer).toBe(buffer);
    expect(holders[2]!.content).toBe(already);
    expect(bytesInPlace([{ content: null }, { content: already }])).toBeNull();
  });

  it('writes the drop detail', () => {
    expect(droppedDetail(0, 0)).toBe('');
    expect(droppedDetail(2, 0)).toBe('dropped 2 invalid');
    expect(droppedDetail(0, 1)).toBe('dropped 1 foreign');
    expect(droppedDetail(1, 1)).toBe('dropped 1 invalid, 1 foreign');
  });

  it('unwraps the envelope or rejects a wrong shape', () => {
    expect(unwrapMemoryResponse({ data: { results: [1, 2] } })).toEqual([1, 2]);
    expect(() => unwrapMemoryResponse([])).toThrow('bad shape: body is not an object');
    expect(() => unwrapMemoryResponse({ results: [] })).toThrow('bad shape: data is not an object');
    expect(() => unwrapMemoryResponse({ data: { results: {} } })).toThrow(
      'bad shape: data.results is not an array',
    );
  });
});

describe('directive envelope (contract.md §4.2)', () => {
  const version = '0f8fad5b-d9cb-469f-a165-70867728950e';
  const env = (o: Record<string, unknown>) =>
    Buffer.from(JSON.stringify({ v: 1, version_id: version, ...o }));

  it('reads a full envelope and canonicalises the version id', () => {
    expect(
      parseDirectiveValue(
        env({ content: 'Be brief.', injection_mode: 'user_prepend', version_id: version.toUpperCase() }),
      ),
    ).toEqual({ content: 'Be brief.', injection_mode: 'user_prepend', version_id: version });
  });

  it.each([
    ['', 'system_first'],
    ['   ', 'system_first'],
    ['bogus', 'system_first'],
    ['system_append', 'system_append'],
    [' System_Append ', 'system_append'],
    ['user_prepend', 'user_prepend'],
    ['system_first', 'system_first'],
  ])('mode %j ⇒ %s', (mode, expected) => {
    expect(parseDirectiveValue(env({ content: 'x', injection_mode: mode }))?.injection_mode).toBe(expected);
  });

  it('missing key, null/absent/empty content ⇒ no directive', () => {
    expect(parseDirectiveValue(null)).toBeNull();
    expect(parseDirectiveValue(env({ content: null, injection_mode: '' }))).toBeNull();
    expect(parseDirectiveValue(env({ injection_mode: 'system_first' }))).toBeNull();
    expect(parseDirectiveValue(env({ content: '', injection_mode: 'system_first' }))).toBeNull();
  });

  it.each([
    ['not UTF-8', Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]), 'bad directive: not UTF-8'],
    ['not JSON', Buffer.from('{"v":1,'), 'bad directive: not JSON'],
    ['an array', Buffer.from('[1]'), 'bad directive: not an object'],
    ['a string', Buffer.from('"hi"'), 'bad directive: not an object'],
    ['v = 2', env({ v: 2, content: 'x', injection_mode: '' }), 'bad directive: v must be 1'],
    ['v = "1"', env({ v: '1', content: 'x', injection_mode: '' }), 'bad directive: v must be 1'],
    [
      'v absent',
      Buffer.from(JSON.stringify({ content: 'x', injection_mode: '', version_id: version })),
      'v must be 1',
    ],
    ['numeric content', env({ content: 5, injection_mode: '' }), 'bad directive: content must be a string'],
    [
      'numeric mode',
      env({ content: 'x', injection_mode: 3 }),
      'bad directive: injection_mode must be a string',
    ],
    [
      'numeric version',
      env({ content: 'x', injection_mode: '', version_id: 1 }),
      'version_id must be a string',
    ],
    ['bad version', env({ content: 'x', injection_mode: '', version_id: 'v1' }), 'version_id must be a UUID'],
  ])('%s ⇒ error', (_name, raw, message) => {
    expect(() => parseDirectiveValue(raw)).toThrow(message);
  });

  it('a bad version id fails even when content is empty', () => {
    expect(() => parseDirectiveObject({ v: 1, content: '', injection_mode: '', version_id: 'nope' })).toThrow(
      'version_id must be a UUID',
    );
  });
});

describe('toFtsQuery', () => {
  it('quotes content terms and joins them with OR, leaving out stopwords', () => {
    expect(toFtsQuery('Where did Caroline go painting?')).toBe('"caroline" OR "painting"');
  });

  it('falls back to the stopwords when nothing else is left', () => {
    expect(toFtsQuery('Where did you go?')).toBe('"where" OR "did" OR "you" OR "go"');
  });

  it('neutralises FTS5 syntax and dedupes', () => {
    expect(toFtsQuery('"a" NEAR(b c) * OR OR ^d col:e near')).toBe('"near" OR "col"');
    expect(toFtsQuery('"a" (b c) * OR OR ^d e:f')).toBe('"a" OR "b" OR "c" OR "or" OR "d" OR "e" OR "f"');
  });

  it('returns null when nothing is searchable', () => {
    expect(toFtsQuery('')).toBeNull();
    expect(toFtsQuery('  "*" () 😀 \uD800 -- ')).toBeNull();
  });

  it('keeps non-Latin letters and caps the term count', () => {
    expect(toFtsQuery('café 東京 ✓')).toBe('"café" OR "東京"');
    const many = Array.from({ length: 100 }, (_, i) => `w${i}`).join(' ');
    expect(toFtsQuery(many)?.split(' OR ')).toHaveLength(8);
  });
});

describe('uuidV5', () => {
  it('matches the RFC 9562 example (DNS namespace, www.example.com)', () => {
    expect(uuidV5('www.example.com', '6ba7b810-9dad-11d1-80b4-00c04fd430c8')).toBe(
      '2ed6657d-e927-568b-95e1-2665a8aea6a2',
    );
  });
});
