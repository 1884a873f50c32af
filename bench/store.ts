/**
 * `npm run bench:store`: the embedded store's reads on LoCoMo. Figures, not gates. Writes bench/results/store.json.
 *
 * - Ingests `../shared/datasets/locomo10` (or `BENCH_LOCOMO`) into a fresh `var/bench-store.db` one agent
 *   per transaction, as `ingest --locomo` does, and counts FTS5 segments before and after `optimize`.
 * - Cold search, µs per call over every LoCoMo QA question in turn: `legacy` = the statement used before
 *   schema v2 (every match of the agent joined with its row and content, then sorted), `topk` = the
 *   store's search (ranked inside FTS5, 2×limit rows joined); each on the unmerged and the merged index.
 * - Top-10 overlap of `topk` with `legacy` on the same file (ids in common, exact lists), and with the
 *   answers of the code before schema v2 (bench/results/store-baseline.json, exact lists by digest).
 * - The retrieval branch's read of an unlimited call (600 candidates, neighbours of the 5 best), interleaved:
 *   the wire-shaped search then `validateHits` (how the thread read it before) vs `searchHits` (hits built directly).
 * - Hot read and directive, µs per call: uncached (SQL, ISO dating, objects) vs the read cache.
 * - Caps: what 20 memories of `IBEX_CONTEXT_MAX_MEMORY_CHARS` (65536) code points cost the main thread —
 *   decoding them from a store-read thread (v8 deserialize = structured clone's receive side), reading
 *   them in-process uncached, and the read when all 20 are one code point over the cap (oversize: no text).
 *
 * Iterations: tinybench, `BENCH_TIME_MS` (default 1000) per task after 200 ms warm-up; medians and p99.
 * Legacy vs top-k also interleaved query by query (`BENCH_PAIRED_ROUNDS`, default 9 passes), robust to
 * the load drift of a shared machine; on the merged index also the search statement with its limit bound
 * as `@limit` vs written into the SQL (the store's form, limit-statement.ts), and their answers compared.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import v8 from 'node:v8';
import Database from 'better-sqlite3';
import { Bench } from 'tinybench';
import { DEFAULT_MAX_CANDIDATES } from '../src/config/ranking-settings.js';
import { DEFAULT_NEIGHBOUR_HITS } from '../src/retrieval/neighbours.js';
import {
  bm25ToSimilarity,
  DEFAULT_MAX_MEMORY_CHARS,
  EmbeddedStore,
  searchSql,
} from '../src/retrieval/sqlite/embedded-store.js';
import { scopeText } from '../src/retrieval/sqlite/store-schema.js';
import { validateHits } from '../src/retrieval/validate.js';
import { toFtsQuery } from '../src/text/fts-query.js';
import { LOCOMO_ORG_ID, readLocomo } from '../src/tools/locomo/dataset.js';
import { locomoDirective, locomoMemories } from '../src/tools/locomo/ingest.js';
import { ftsSegments } from './lib/fts-segments.js';
import { projectPath, writeResult } from './lib/paths.js';

const ORG = LOCOMO_ORG_ID;
const BIG_AGENT = '7e1d0c9b-8a7f-4e6d-9c5b-4a3f2e1d0c9b';
const OVER_AGENT = '7e1d0c9b-8a7f-4e6d-9c5b-4a3f2e1d0c9c';

interface Query {
  agent: string;
  text: string;
}

/** The statement of the store before schema v2 (commit ff49bfe), on today's scope token. */
function legacySearch(db: Database.Database) {
  const stmt = db.prepare<[string, string, string], { id: string; created_at: number; score: number }>(
    `SELECT m.id, m.org_id, m.agent_id, m.content, m.category, m.confidence, m.created_at,
       bm25(memories_fts, 1.0, 0.0) AS score
     FROM memories_fts JOIN memories m ON m.pk = memories_fts.rowid
     WHERE memories_fts MATCH ? AND m.org_id = ? AND m.agent_id = ? AND m.confidence >= 0
     ORDER BY score, m.id LIMIT 10`,
  );
  return (q: Query): string[] => {
    const terms = toFtsQuery(q.text);
    if (terms === null) return [];
    const match = `scope:"${scopeText(ORG, q.agent)}" AND content:(${terms})`;
    // The legacy path also dated and shaped every hit.
    return stmt.all(match, ORG, q.agent).map((r) => {
      void new Date(r.created_at).toISOString();
      void bm25ToSimilarity(r.score);
      return r.id;
    });
  };
}

/**
 * Two searches interleaved query by query (the same load drift hits both), `rounds` passes over every 5th
 * question, the one that runs first alternating from query to query (the second runs on caches the first
 * warmed); the mean µs per search of each pass, best and median pass reported under the two names.
 */
function pairedSearch<A extends string, B extends string>(
  queries: Query[],
  a: (q: Query) => unknown,
  b: (q: Query) => unknown,
  rounds: number,
  names: [A, B],
) {
  const sample = queries.filter((_, i) => i % 5 === 0);
  const passes: [number, number][] = [];
  for (let r = 0; r < rounds; r++) {
    let ta = 0;
    let tb = 0;
    for (const [i, q] of sample.entries()) {
      const [first, second] = i % 2 === 0 ? [a, b] : [b, a];
      const t0 = performance.now();
      first(q);
      const t1 = performance.now();
      second(q);
      const t2 = performance.now();
      ta += i % 2 === 0 ? t1 - t0 : t2 - t1;
      tb += i % 2 === 0 ? t2 - t1 : t1 - t0;
    }
    passes.push([(ta / sample.length) * 1000, (tb / sample.length) * 1000]);
  }
  const stat = (k: 0 | 1) => {
    const v = passes.map((p) => p[k]).sort((x, y) => x - y);
    return { best_us: Math.round(v[0]!), median_us: Math.round(v[v.length >> 1]!) };
  };
  return {
    queries_per_pass: sample.length,
    passes: rounds,
    ...({ [names[0]]: stat(0) } as Record<A, ReturnType<typeof stat>>),
    ...({ [names[1]]: stat(1) } as Record<B, ReturnType<typeof stat>>),
  };
}

/**
 * FTS5's own ranked search statement (`searchSql`, what the store ranked by before BM25 over the agent's
 * rows) with its limit written as `limit`: `"@limit"` (bound: SQLite re-plans it on every run) or `"10"`
 * (written in); the two differ only in the limit's form.
 */
function limitFormSearch(db: Database.Database, limit: '@limit' | '10') {
  const stmt = db.prepare<Record<string, unknown>, { id: string }>(searchSql(limit));
  return (q: Query): string[] => {
    const terms = toFtsQuery(q.text);
    if (terms === null) return [];
    const match = `scope:"${scopeText(ORG, q.agent)}" AND content:(${terms})`;
    const params = { match, agent: q.agent, org: ORG, minConfidence: 0, maxChars: DEFAULT_MAX_MEMORY_CHARS };
    return stmt.all({ ...params, limit: 10 }).map((r) => r.id);
  };
}

const digest = (ids: string[]) => createHash('sha256').update(ids.join(',')).digest('hex').slice(0, 16);

function overlap(queries: Query[], a: (q: Query) => string[], b: (q: Query) => string[]) {
  let common = 0;
  let total = 0;
  let exact = 0;
  for (const q of queries) {
    const x = a(q);
    const y = new Set(b(q));
    total += y.size;
    common += x.filter((id) => y.has(id)).length;
    if (x.join() === [...y].join()) exact++;
  }
  return { queries: queries.length, ids_in_common: common, ids_total: total, exact_lists: exact };
}

function bigRows(agent: string, chars: number, unit: string) {
  return Array.from({ length: 20 }, (_, i) => ({
    id: `5b0e2c4d-6f7a-4b8c-9d0e-${(0x1f2a3b4c5d00 + i + (agent === BIG_AGENT ? 0 : 100)).toString(16)}`,
    org_id: ORG,
    agent_id: agent,
    content: unit.repeat(chars),
    category: 'factual',
    confidence: 0.9,
    created_at: 1_700_000_000_000 + i,
  }));
}

async function main() {
  const time = Number(process.env.BENCH_TIME_MS ?? 1000);
  const locomo = process.env.BENCH_LOCOMO ?? projectPath('../shared/datasets/locomo10');
  const file = projectPath('var/bench-store.db');
  for (const f of [file, `${file}-wal`, `${file}-shm`]) rmSync(f, { force: true });
  mkdirSync(projectPath('var'), { recursive: true });

  const conversations = await readLocomo(locomo);
  const t0 = performance.now();
  const writer = EmbeddedStore.open(file);
  for (const conv of conversations) {
    writer.replaceAgent(ORG, conv.agentId, locomoMemories(conv, ORG), locomoDirective(conv, ORG));
  }
  const ingestMs = performance.now() - t0;
  const memories = writer.counts().memories;
  const queries: Query[] = conversations.flatMap((c) =>
    c.qa.map((q) => ({ agent: c.agentId, text: q.question })),
  );
  const agents = conversations.map((c) => c.agentId);

  const store = EmbeddedStore.open(file);
  const raw = new Database(file, { readonly: true });
  const legacy = legacySearch(raw);
  const topk = (q: Query) => store.search(ORG, q.agent, q.text).map((h) => h.memory.id);
  const cycle = <T>(items: T[]) => {
    let i = 0;
    return () => items[i++ % items.length]!;
  };

  const bench = new Bench({ time, warmupTime: 200, retainSamples: false });
  const segmentsBefore = ftsSegments(file);
  const addSearch = (label: string) => {
    const nextL = cycle(queries);
    const nextT = cycle(queries);
    bench.add(`search legacy (${label})`, () => void legacy(nextL()));
    bench.add(`search topk (${label})`, () => void topk(nextT()));
  };
  addSearch('unmerged');
  await bench.run();
  const unmergedTasks = bench.tasks.length;
  const rounds = Number(process.env.BENCH_PAIRED_ROUNDS ?? 9);
  const pairedUnmerged = pairedSearch(queries, legacy, topk, rounds, ['legacy', 'topk']);

  const tOpt = performance.now();
  writer.optimize();
  const optimizeMs = performance.now() - tOpt;
  const segmentsAfter = ftsSegments(file);
  const pairedMerged = pairedSearch(queries, legacy, topk, rounds, ['legacy', 'topk']);
  const bound = limitFormSearch(raw, '@limit');
  const literal = limitFormSearch(raw, '10');
  const pairedLimit = pairedSearch(queries, bound, literal, rounds, ['bound_limit', 'literal_limit']);
  // The retrieval branch's read of an unlimited call: up to 600 candidates with dialogue neighbours.
  const branch = { limit: DEFAULT_MAX_CANDIDATES, neighbours: DEFAULT_NEIGHBOUR_HITS };
  const viaWire = (q: Query) =>
    validateHits(store.search(ORG, q.agent, q.text, branch), ORG, q.agent, {
      limit: branch.limit,
      maxChars: DEFAULT_MAX_MEMORY_CHARS,
    }).hits.length;
  const direct = (q: Query) => store.searchHits(ORG, q.agent, q.text, branch).hits.length;
  const pairedBranch = pairedSearch(queries, viaWire, direct, rounds, ['wire_then_validate', 'search_hits']);
  let branchRows = 0;
  for (const q of queries) branchRows += direct(q);
  addSearch('merged');

  const uncached = EmbeddedStore.open(file, { cache: false });
  const nextA = cycle(agents);
  bench.add('hot uncached', () => void uncached.hot(ORG, nextA()));
  bench.add('hot cached', () => void store.hot(ORG, nextA()));
  bench.add('directive uncached', () => void uncached.getDirective(ORG, nextA()));
  bench.add('directive cached', () => void store.getDirective(ORG, nextA()));

  // Caps, in a file of their own so that LoCoMo's BM25 statistics stay those of LoCoMo: 20 memories at
  // the cap, and 20 one code point over it, of three kinds of text.
  const capsFile = projectPath('var/bench-store-caps.db');
  for (const f of [capsFile, `${capsFile}-wal`, `${capsFile}-shm`]) rmSync(f, { force: true });
  const capsWriter = EmbeddedStore.open(capsFile);
  const capsReader = EmbeddedStore.open(capsFile, { cache: false });
  const decode: Record<string, { bytes: number }> = {};
  for (const [kind, unit] of [
    ['ascii', 'a'],
    ['cjk', '茶'],
    ['emoji', '😀'],
  ] as const) {
    capsWriter.replaceAgent(ORG, BIG_AGENT, bigRows(BIG_AGENT, DEFAULT_MAX_MEMORY_CHARS, unit));
    const hits = capsReader.hot(ORG, BIG_AGENT);
    const wire = v8.serialize(hits);
    decode[kind] = { bytes: wire.length };
    bench.add(`decode 20×64K ${kind} (main thread)`, () => void v8.deserialize(wire));
    if (kind === 'cjk') {
      bench.add('hot uncached 20×64K cjk (in-process)', () => void capsReader.hot(ORG, BIG_AGENT));
    }
  }
  capsWriter.replaceAgent(ORG, OVER_AGENT, bigRows(OVER_AGENT, DEFAULT_MAX_MEMORY_CHARS + 1, '茶'));
  bench.add('hot uncached 20 oversize (no text)', () => void capsReader.hot(ORG, OVER_AGENT));
  await bench.run();

  const tasks = bench.tasks.map((task, i) => {
    const lat = (task.result as { latency?: { p50: number; p99: number; samplesCount: number } }).latency!;
    return {
      task: task.name,
      phase: i < unmergedTasks ? 'unmerged' : 'merged',
      p50_us: Math.round(lat.p50 * 10_000) / 10,
      p99_us: Math.round(lat.p99 * 10_000) / 10,
      samples: lat.samplesCount,
    };
  });

  const baselineFile = projectPath('bench/results/store-baseline.json');
  let baseline: { exact_lists: number; queries: number } | null = null;
  if (existsSync(baselineFile)) {
    const { top10 } = JSON.parse(readFileSync(baselineFile, 'utf8')) as { top10: string[] };
    const ours = queries.map((q) => digest(topk(q)));
    baseline = {
      queries: top10.length,
      exact_lists: ours.filter((d, i) => d === top10[i]).length,
    };
  }
  const result = {
    generated_at: new Date().toISOString(),
    node: process.version,
    sqlite: (raw.prepare('SELECT sqlite_version() AS v').get() as { v: string }).v,
    note: 'shared 2-core machine unless re-run quietly; µs per call, tinybench p50/p99',
    dataset: { memories, agents: agents.length, queries: queries.length },
    ingest_ms: Math.round(ingestMs),
    fts_segments: {
      after_ingest: segmentsBefore,
      after_optimize: segmentsAfter,
      optimize_ms: Math.round(optimizeMs),
    },
    search_paired: { unmerged: pairedUnmerged, merged: pairedMerged, merged_limit_form: pairedLimit },
    branch_search_600: { ...pairedBranch, hits_per_search: Math.round(branchRows / queries.length) },
    top10_overlap: {
      vs_legacy_statement: overlap(queries, topk, legacy),
      vs_bound_limit_statement: overlap(queries, topk, bound),
      literal_vs_bound_limit: overlap(queries, literal, bound),
      vs_pre_v2_code: baseline,
    },
    decode_payload_bytes: decode,
    tasks,
  };
  raw.close();
  capsReader.close();
  capsWriter.close();
  uncached.close();
  store.close();
  writer.close();
  writeResult('store', result);
  console.table(tasks);
  console.log(JSON.stringify({ ...result, tasks: undefined }, null, 2));
  console.log('wrote bench/results/store.json');
}

await main();
