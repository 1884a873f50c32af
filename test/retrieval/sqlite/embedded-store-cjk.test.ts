/**
 * Embedded-store cold search in text without spaces (contract.md §4.3) and the FTS5 query builder's
 * safety: user text is never FTS5 syntax and never widens a search to another org or agent.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { toFtsQuery } from '../../../src/text/fts-query.js';
import { memoryRow, retrieveEmbedded, useTempStore } from '../fixtures.js';

const ORG = randomUUID();
const OTHER_ORG = randomUUID();
const AGENT = randomUUID();
const OTHER_AGENT = randomUUID();

const fx = useTempStore();

/** One memory of `content` for ORG/AGENT (or the given org/agent), created at `i` minutes. */
const memory = (content: string, i = 0, org = ORG, agent = AGENT) => memoryRow(org, agent, content, i);

describe('cold search in text without spaces (contract.md §4.3)', () => {
  const cases: [string, string][] = [
    ['绿茶', '用户喜欢喝绿茶，每天早上都喝一杯'],
    ['大阪', '来月は大阪に行きます'],
    ['부산', '다음 주에 부산에서 친구를 만나요'],
    ['kit', '部署脚本build-kit运行成功'],
  ];
  it.each(cases)('%s is found inside %s, with cold=success through retrieve', async (query, text) => {
    fx.store.upsertMemories([memory(text), memory('the kitchen kit-car note about gardening', 1)]);
    const direct = fx.store.search(ORG, AGENT, query).map((h) => h.memory.content);
    expect(direct[0] === text || direct.includes(text)).toBe(true);
    const r = await retrieveEmbedded(fx.store, {
      orgId: ORG,
      agentId: AGENT,
      query,
      skipHot: true,
      skipCold: false,
    });
    expect(r.branches[2]).toMatchObject({ name: 'cold', status: 'success' });
    expect(r.cold.map((h) => h.content)).toContain(text);
  });

  it('CJK matches are exact bigrams: 绿茶 does not find 红茶, 茶 finds both', () => {
    fx.store.upsertMemories([memory('我喜欢红茶'), memory('用户喜欢喝绿茶', 1)]);
    expect(fx.store.search(ORG, AGENT, '绿茶').map((h) => h.memory.content)).toEqual(['用户喜欢喝绿茶']);
    expect(new Set(fx.store.search(ORG, AGENT, '茶').map((h) => h.memory.content))).toEqual(
      new Set(['我喜欢红茶', '用户喜欢喝绿茶']),
    );
    // A longer CJK query ranks the memory holding all its bigrams first.
    expect(fx.store.search(ORG, AGENT, '喝绿茶吗')[0]!.memory.content).toBe('用户喜欢喝绿茶');
  });

  it('kit glued to CJK does not turn English into substring search: kit does not find kitchen', () => {
    fx.store.upsertMemories([memory('the kitchen is clean'), memory('部署脚本build-kit运行成功', 1)]);
    expect(fx.store.search(ORG, AGENT, 'kit').map((h) => h.memory.content)).toEqual([
      '部署脚本build-kit运行成功',
    ]);
  });
});

describe('FTS query builder: user text is never syntax (property)', () => {
  const hostile = fc.constantFrom(
    '"',
    '*',
    '^',
    '(',
    ')',
    ':',
    '-',
    '+',
    ' ',
    'NEAR',
    'NEAR(',
    'OR',
    'AND',
    'NOT',
    'content:',
    'scope:',
    '{content scope}:',
    '绿茶',
    '부산',
    'kit',
    '😀',
    '\uD800',
    'gardening',
    'memory',
    '\u0000',
  );
  const text = fc.array(fc.oneof(hostile, fc.string({ unit: 'binary', maxLength: 6 })), { maxLength: 12 });

  it('toFtsQuery emits only quoted terms joined by OR (a one-character prefix at most)', () => {
    const grammar = /^"[^"\s]+"\*?( OR "[^"\s]+"\*?)*$/u;
    fc.assert(
      fc.property(text, (parts) => {
        const q = toFtsQuery(parts.join(''));
        return q === null || grammar.test(q);
      }),
      { numRuns: 500 },
    );
  });

  it('search never throws and never returns another org or agent, even when it names their scope', () => {
    const otherScope = `a${OTHER_AGENT.replaceAll('-', '')}${ORG.replaceAll('-', '')}`;
    const same = ['gardening memory 绿茶 kit', '부산 painting note', 'scope content NEAR'];
    fx.store.upsertMemories([
      ...same.map((c, i) => memory(c, i)),
      ...same.map((c, i) => memory(c, i, OTHER_ORG, AGENT)),
      ...same.map((c, i) => memory(c, i, ORG, OTHER_AGENT)),
    ]);
    fc.assert(
      fc.property(
        fc.oneof(text, fc.constant([`scope:${otherScope}`, ' OR ', `"${otherScope}"*`])),
        (parts) => {
          const hits = fx.store.search(ORG, AGENT, parts.join(''));
          return (
            hits.length <= 3 &&
            hits.every((h) => h.memory.org_id === ORG && h.memory.agent_id === AGENT && h.similarity <= 1)
          );
        },
      ),
      { numRuns: 300 },
    );
  });
});
