/**
 * What one PostgreSQL cold search of an unlimited call (600 candidates, neighbours of the 5 best) costs the
 * event loop, two ways, interleaved question by question over the same LoCoMo store:
 * - `rows`: one DataRow per hit, parsed by node-postgres into row objects, mapped to wire hits and
 *   validated (`PgStore.search` then `validateHits`, the shape the memory wire serves);
 * - `packed`: the retrieval branch's read (`PgStore.searchHits`), one aggregated row of columns with the
 *   contents as one bytea.
 * Process CPU (`process.cpuUsage`: node-postgres and the mapping run on this thread) and wall per search,
 * the mean of each of 3 rounds after a warm-up round, best and median round, and the database's own CPU
 * per search (its backends' /proc/<pid>/stat, read around each search; same machine only).
 *
 * Usage: node dist/bench/pg-search.js --pg-url postgres://… [--dataset DIR] [--every 3] [--limit 600]
 *   [--out pg-search]
 * Ingests LoCoMo into the schema `ibex_bench_pg_search` (replaced, dropped at the end).
 */
import pg from 'pg';
import { DEFAULT_MAX_CANDIDATES } from '../src/config/ranking-settings.js';
import { DEFAULT_NEIGHBOUR_HITS } from '../src/retrieval/neighbours.js';
import { PgStore } from '../src/retrieval/postgres/pg-store.js';
import { validateHits } from '../src/retrieval/validate.js';
import { LOCOMO_ORG_ID, readLocomo } from '../src/tools/locomo/dataset.js';
import { ingestLocomo } from '../src/tools/locomo/ingest.js';
import { machineInfo } from './lib/bench-run.js';
import { projectPath, writeResult } from './lib/paths.js';
import { backendCpu } from './lib/pg-backend-cpu.js';
import { processCpuS } from './lib/pinned.js';

const SCHEMA = 'ibex_bench_pg_search';
const ROUNDS = 3;

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const flag = (name: string, fallback?: string) => {
    const at = argv.indexOf(name);
    return at >= 0 && argv[at + 1] !== undefined ? argv[at + 1]! : fallback;
  };
  const url = flag('--pg-url');
  if (url === undefined) throw new Error('usage: pg-search --pg-url postgres://… [--dataset DIR]');
  const every = Number(flag('--every', '3'));
  const convs = await readLocomo(flag('--dataset', projectPath('../shared/datasets/locomo10'))!);
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const store = await PgStore.open({ url, schema: SCHEMA, poolMax: 2 });
  try {
    await ingestLocomo(store, convs, LOCOMO_ORG_ID, { db: `postgres:${SCHEMA}` });
    await store.finishImport();
    const questions = convs
      .flatMap((c) =>
        c.qa
          .filter((q) => (q.category ?? 0) >= 1 && (q.category ?? 0) <= 4)
          .map((q) => ({ agent: c.agentId, text: q.question })),
      )
      .filter((_, i) => i % every === 0);
    const limit = Number(flag('--limit', String(DEFAULT_MAX_CANDIDATES)));
    const opts = { timeoutMs: 5_000, limit, neighbours: DEFAULT_NEIGHBOUR_HITS };
    const rows = async (q: { agent: string; text: string }) =>
      validateHits(await store.search(LOCOMO_ORG_ID, q.agent, q.text, opts), LOCOMO_ORG_ID, q.agent).hits
        .length;
    const packed = async (q: { agent: string; text: string }) =>
      (await store.searchHits(LOCOMO_ORG_ID, q.agent, q.text, opts)).hits.length;
    const ways = { rows, packed } as const;
    type Way = keyof typeof ways;
    const rounds: Record<Way, { cpu_ms: number; wall_ms: number; db_cpu_ms: number; hits: number }[]> = {
      rows: [],
      packed: [],
    };
    let backends: number[] = [];
    const dbSeconds = () => {
      let t = 0;
      for (const pid of backends) t += backendSeconds(pid);
      return t;
    };
    for (let r = 0; r <= ROUNDS; r++) {
      const sum = {
        rows: { cpu: 0, wall: 0, db: 0, hits: 0 },
        packed: { cpu: 0, wall: 0, db: 0, hits: 0 },
      };
      for (const [i, q] of questions.entries()) {
        // The one that runs first alternates, so neither always meets the other's warmed caches.
        const order: Way[] = i % 2 === 0 ? ['rows', 'packed'] : ['packed', 'rows'];
        for (const way of order) {
          const db0 = dbSeconds();
          const cpu0 = process.cpuUsage();
          const t0 = performance.now();
          sum[way].hits += await ways[way](q);
          sum[way].wall += performance.now() - t0;
          const cpu = process.cpuUsage(cpu0);
          sum[way].cpu += (cpu.user + cpu.system) / 1000;
          sum[way].db += (dbSeconds() - db0) * 1000;
        }
      }
      // The store's backends, opened by the warm-up round (application_name ibex-context).
      if (r === 0) {
        backends = [...(await backendCpu(admin)).keys()];
        continue;
      }
      for (const way of ['rows', 'packed'] as const) {
        const n = questions.length;
        rounds[way].push({
          cpu_ms: sum[way].cpu / n,
          wall_ms: sum[way].wall / n,
          db_cpu_ms: sum[way].db / n,
          hits: sum[way].hits / n,
        });
      }
    }
    const stat = (way: Way) => {
      const cpu = rounds[way].map((x) => x.cpu_ms).sort((a, b) => a - b);
      const wall = rounds[way].map((x) => x.wall_ms).sort((a, b) => a - b);
      const db = rounds[way].map((x) => x.db_cpu_ms).sort((a, b) => a - b);
      const r2 = (v: number) => Math.round(v * 1000) / 1000;
      return {
        cpu_ms_per_search: { best: r2(cpu[0]!), median: r2(cpu[cpu.length >> 1]!) },
        wall_ms_per_search: { best: r2(wall[0]!), median: r2(wall[wall.length >> 1]!) },
        database_cpu_ms_per_search: { best: r2(db[0]!), median: r2(db[db.length >> 1]!) },
        hits_per_search: Math.round(rounds[way][0]!.hits),
      };
    };
    const result = {
      generated_at: new Date().toISOString(),
      node: process.version,
      machine: machineInfo(),
      postgres: (await admin.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]
        ?.v,
      searches_per_round: questions.length,
      rounds: ROUNDS,
      limit: opts.limit,
      neighbours: opts.neighbours,
      rows: stat('rows'),
      packed: stat('packed'),
    };
    writeResult(flag('--out', 'pg-search')!, result);
    console.log(JSON.stringify(result, null, 2));
  } finally {
    await store.close();
    await admin.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
    await admin.end();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

/** CPU seconds of one backend so far; 0 once it is gone. */
function backendSeconds(pid: number): number {
  try {
    return processCpuS(pid);
  } catch {
    return 0;
  }
}
