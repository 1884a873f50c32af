/** Synthetic memories so warm-up compiles the per-candidate code; never written to a served store. */
import type { MemoryRow } from './store-rows.js';

const SPEAKERS = ['Caroline', 'Melanie', 'Jon', 'Gina'];
const WORDS = [
  'support group painting camping yesterday family friends weekend',
  'went to the beach with my kids and we had a great time',
  'I am thinking about adopting a dog from the shelter next month',
  'my new job at the studio starts on Monday and I feel nervous',
  'we talked about the charity race and the book club meeting',
  'she made a vase in her pottery class and painted it blue',
];
const CATEGORIES = ['episodic', 'factual', 'preference'];

/** Words kept from a memory to make a warm-up query; a LoCoMo question has about this many. */
const QUERY_WORDS = 8;

/**
 * A search query from a stored memory's text: its first {@link QUERY_WORDS} words of letters or digits
 * (from the first 400 characters), so the warm-up's searches match rows as a user's question would.
 */
export function queryFromContent(content: string): string {
  return (content.slice(0, 400).match(/[\p{L}\p{N}]{2,}/gu) ?? []).slice(0, QUERY_WORDS).join(' ');
}

/** Warm-up queries from stored memories' texts, one per text that has words. */
export function queriesFromContents(contents: readonly string[]): string[] {
  return contents.map(queryFromContent).filter((q) => q !== '');
}

export const WARM_QUERY = 'what did Caroline say about the support group and painting with friends';

function warmId(i: number): string {
  return `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
}

export function warmContent(i: number): string {
  const a = WORDS[i % WORDS.length]!;
  const b = WORDS[(i * 7 + 3) % WORDS.length]!;
  return `${SPEAKERS[i % SPEAKERS.length]}: ${a}${i % 3 === 0 ? `, and ${b}` : ''} (${i})`;
}

/** Newest first, a day apart from `nowMs`. */
export function warmMemoryRows(orgId: string, agentId: string, n: number, nowMs: number): MemoryRow[] {
  return Array.from({ length: n }, (_, i) => ({
    id: warmId(i),
    org_id: orgId,
    agent_id: agentId,
    content: warmContent(i),
    category: CATEGORIES[i % CATEGORIES.length]!,
    confidence: 0.5 + (i % 5) / 10,
    created_at: nowMs - i * 86_400_000,
  }));
}

/** As raw store-search hits (falling similarity, contents as UTF-8 bytes). */
export function warmSearchHits(orgId: string, agentId: string, n: number, nowMs: number): unknown[] {
  return warmMemoryRows(orgId, agentId, n, nowMs).map((row, i) => ({
    memory: {
      id: row.id,
      org_id: row.org_id,
      agent_id: row.agent_id,
      content: Buffer.from(row.content, 'utf8'),
      category: row.category,
      confidence: row.confidence,
      created_at: row.created_at,
      usefulness: 0.5,
      retrieval_count: i % 4,
    },
    similarity: 0.95 - (0.9 * i) / Math.max(1, n),
    rank: i + 1,
    source: 'fts',
  }));
}
