import type { MemoryRow } from '../../src/retrieval/store-rows.js';

/** One hit as a memory source's search answers it (the JSON shape of a `results` entry). */
export interface MemoryHitJson {
  memory: Omit<MemoryRow, 'created_at'>;
  similarity: number;
  rank: number;
  source: string;
}

/**
 * A factual memory hit with a deterministic id (`00000000-0000-4000-8000-<i, 12 digits>`).
 *
 * @param content the memory's text.
 * @param i the id's number; also the hit's rank unless `rank` is given.
 * @param opts owner (`org`, `agent`), `confidence` and `similarity` (both 0..1), `rank`, `source` name.
 */
export function memoryHit(
  content: string,
  i: number,
  opts: { org: string; agent: string; confidence: number; similarity: number; rank?: number; source: string },
): MemoryHitJson {
  return {
    memory: {
      id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      org_id: opts.org,
      agent_id: opts.agent,
      content,
      category: 'factual',
      confidence: opts.confidence,
    },
    similarity: opts.similarity,
    rank: opts.rank ?? i,
    source: opts.source,
  };
}
