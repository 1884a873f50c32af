/**
 * A store-read thread's search hits in columns, for the trip to the event loop (docs/design/embedded-store.md,
 * "Hits cross in columns"). Structured clone of ~450 hit objects re-reads every property name and builds
 * every object in V8's deserializer, on the event loop; columns cross as one string, one Float64Array and
 * one transferred buffer, and the event loop builds the hits as plain object literals.
 */
import type { MemoryHit } from '../../wire/types.js';
import type { ValidatedHits } from '../validate.js';

/** Per hit: confidence, similarity, created_at_ms (NaN: none), usefulness (NaN: none), inclusions (−1: none),
 * rank, category index, end of its id in `ids`, end of its content in `contents`. */
const STRIDE = 9;

export interface PackedHits {
  packed: true;
  count: number;
  /** Every hit's org and agent: the thread kept only the request's (the rest are counted `foreign`). */
  orgId: string;
  agentId: string;
  /** The memory ids, concatenated. */
  ids: string;
  categories: string[];
  numbers: Float64Array;
  /** UTF-8 contents, concatenated; its buffer is transferred. */
  contents: Uint8Array;
  invalid: number;
  foreign: number;
  oversize: number;
  ignored: number;
}

/**
 * Packs `hits` (all of one org and agent, `source` `fts`); pushes the contents' buffer onto `transfer`.
 * @returns null when a hit does not fit the columns (another source, another org or agent): the caller
 *   then sends the hits as they are.
 */
export function packHits(v: ValidatedHits, transfer: ArrayBuffer[]): PackedHits | null {
  const n = v.hits.length;
  const first = v.hits[0];
  let bytes = 0;
  for (const h of v.hits) {
    if (h.source !== 'fts' || h.org_id !== first!.org_id || h.agent_id !== first!.agent_id) return null;
    bytes += typeof h.content === 'string' ? Buffer.byteLength(h.content, 'utf8') : h.content.byteLength;
  }
  const buffer = new ArrayBuffer(bytes);
  const out = Buffer.from(buffer);
  const numbers = new Float64Array(STRIDE * n);
  const categories: string[] = [];
  const categoryIndex = new Map<string, number>();
  let ids = '';
  let at = 0;
  for (let i = 0; i < n; i++) {
    const h = v.hits[i]!;
    let c = categoryIndex.get(h.category);
    if (c === undefined) {
      c = categories.length;
      categories.push(h.category);
      categoryIndex.set(h.category, c);
    }
    if (typeof h.content === 'string') at += out.write(h.content, at, 'utf8');
    else {
      out.set(h.content, at);
      at += h.content.byteLength;
    }
    ids += h.memory_id;
    const k = STRIDE * i;
    numbers[k] = h.confidence;
    numbers[k + 1] = h.similarity;
    numbers[k + 2] = h.created_at_ms ?? Number.NaN;
    numbers[k + 3] = h.usefulness ?? Number.NaN;
    numbers[k + 4] = h.inclusions ?? -1;
    numbers[k + 5] = h.rank;
    numbers[k + 6] = c;
    numbers[k + 7] = ids.length;
    numbers[k + 8] = at;
  }
  transfer.push(buffer);
  return {
    packed: true,
    count: n,
    orgId: first?.org_id ?? '',
    agentId: first?.agent_id ?? '',
    ids,
    categories,
    numbers,
    contents: new Uint8Array(buffer),
    invalid: v.invalid,
    foreign: v.foreign,
    oversize: v.oversize,
    ignored: v.ignored,
  };
}

export function isPackedHits(value: unknown): value is PackedHits {
  return typeof value === 'object' && value !== null && (value as { packed?: unknown }).packed === true;
}

/** The hits {@link packHits} was given, contents as views on the transferred buffer, in the same order. */
export function unpackHits(p: PackedHits): ValidatedHits {
  const hits: MemoryHit[] = [];
  const { numbers, ids, contents } = p;
  let idStart = 0;
  let contentStart = 0;
  for (let i = 0; i < p.count; i++) {
    const k = STRIDE * i;
    const idEnd = numbers[k + 7]!;
    const contentEnd = numbers[k + 8]!;
    // Fields in validateHit's order, so every hit has one object shape.
    const hit: MemoryHit = {
      memory_id: ids.slice(idStart, idEnd),
      org_id: p.orgId,
      agent_id: p.agentId,
      content: contents.subarray(contentStart, contentEnd),
      category: p.categories[numbers[k + 6]!]!,
      confidence: numbers[k]!,
      similarity: numbers[k + 1]!,
      rank: numbers[k + 5]!,
      source: 'fts',
    };
    const created = numbers[k + 2]!;
    if (!Number.isNaN(created)) hit.created_at_ms = created;
    const usefulness = numbers[k + 3]!;
    if (!Number.isNaN(usefulness)) hit.usefulness = usefulness;
    const inclusions = numbers[k + 4]!;
    if (inclusions >= 0) hit.inclusions = inclusions;
    hits.push(hit);
    idStart = idEnd;
    contentStart = contentEnd;
  }
  return { hits, invalid: p.invalid, foreign: p.foreign, oversize: p.oversize, ignored: p.ignored };
}
