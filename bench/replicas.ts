/**
 * `npm run bench:replicas [-- --rate 400 --seconds 10 --locomo <dir> --pg-url <url>]`: two
 * `serve` processes sharing one PostgreSQL database, the LoCoMo load split between them, against the same
 * load on one replica; and the top-10 overlap of PostgreSQL's cold search with the embedded store's, with
 * both stores' recall@10 of LoCoMo's QA evidence turns.
 *
 * Steps: LoCoMo is ingested into a fresh schema (and into a temporary embedded store for the overlap);
 * one replica takes the whole offered rate, then two replicas take half each at the same time (requests
 * dealt alternately). Per replica: achieved rate, p50/p99, errors, degraded answers (open loop, latency
 * from the intended send time — bench/lib/load-step.ts). Database CPU: the CPU seconds the PostgreSQL
 * backends of the replicas (`application_name = 'ibex-context'`) used during the window, read from
 * `/proc/<pid>/stat` of the pids pg_stat_activity names (the same machine only).
 *
 * Writes bench/results/replicas.json and prints a table. Figures, not gates: on a shared two-core machine
 * the driver, both replicas and PostgreSQL compete for the same cores, so two replicas cannot show a
 * speed-up here; the figure that transfers is CPU per call (service and database) and that the shared
 * store keeps errors at zero. The schema is dropped at the end.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { stringFlags } from '../src/cli/command-args.js';
import { locomoRequests } from '../src/client/locomo-requests.js';
import { cyclingSource } from '../src/client/request-source.js';
import { LOCOMO_ORG_ID, type LocomoConversation, readLocomo } from '../src/locomo/dataset.js';
import { ingestLocomo } from '../src/locomo/ingest.js';
import { EmbeddedStore } from '../src/retrieval/embedded-store.js';
import { ingestLocomoPostgres } from '../src/retrieval/postgres/ingest-locomo.js';
import { PgStore } from '../src/retrieval/postgres/pg-store.js';
import type { AssembleContextRequestInput } from '../src/server/proto.js';
import { benchOptions, machineInfo, parseNumber, runBenchMain, tempDir } from './lib/bench-run.js';
import { measureStep, type StepRow } from './lib/load-step.js';
import { projectPath } from './lib/paths.js';
import { explainFailure, type ServiceProcess, startServiceProcess } from './lib/service-process.js';

const USAGE = `usage: npm run bench:replicas -- [options]
  --rate <rps>          total offered rate, split across the replicas (default 400)
  --seconds <s>         measured seconds per phase (default 10)
  --ramp-seconds <s>    unrecorded seconds before each phase (default 2)
  --connections <n>     gRPC channels per replica (default 4)
  --threads <n>         pool threads per replica (default 1: two replicas on two cores)
  --pool-max <n>        PostgreSQL connections per replica (default 8)
  --overlap-queries <n> LoCoMo queries compared for the top-10 overlap (default 500)
  --locomo <dir>        LoCoMo directory (default ../shared/datasets/locomo10 when present)
  --pg-url <url>        database (default PG_URL or postgres://postgres@127.0.0.1:5432/test)
  --out <dir>           where replicas.json goes (default bench/results)`;

const CLK_TCK = 100;

/** CPU seconds of the replicas' PostgreSQL backends, by pid. */
async function backendCpu(admin: pg.Client): Promise<Map<number, number>> {
  const rows = await admin.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'ibex-context'",
  );
  const out = new Map<number, number>();
  for (const { pid } of rows.rows) {
    try {
      const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
      out.set(pid, (Number(rest[11]) + Number(rest[12])) / CLK_TCK);
    } catch {
      // Backend gone, or not on this machine.
    }
  }
  return out;
}

function cpuDelta(a: Map<number, number>, b: Map<number, number>): number {
  let s = 0;
  // A backend opened during the window (the pool grows under load) counts whole.
  for (const [pid, t] of b) s += t - (a.get(pid) ?? 0);
  return Math.round(s * 100) / 100;
}

interface PhaseRow {
  replica: number;
  offered_rps: number;
  achieved_rps: number;
  p50_ms: number;
  p99_ms: number;
  errors: number;
  errors_by_code: Record<string, number>;
  degraded: number;
  server_cpu_cores: number | null;
  /** The driver's own loop was saturated or late (then latencies include driver time). */
  driver_limited: boolean;
  /** Cores busy beyond the servers and the driver: other processes on a shared machine. */
  other_processes_cores: number | null;
  warnings: string[];
}

function phaseRow(replica: number, row: StepRow): PhaseRow {
  return {
    replica,
    offered_rps: row.rate,
    achieved_rps: Math.round(row.achieved_rps),
    p50_ms: row.p50_ms,
    p99_ms: row.p99_ms,
    errors: row.errors,
    errors_by_code: row.errors_by_code,
    degraded: row.degraded,
    server_cpu_cores: row.server.cpu_cores?.total ?? null,
    driver_limited: row.driver.limited,
    other_processes_cores: row.other_processes_cores,
    warnings: row.warnings,
  };
}

async function runPhase(
  services: ServiceProcess[],
  parts: AssembleContextRequestInput[][],
  rate: number,
  o: { seconds: number; ramp: number; connections: number },
  admin: pg.Client,
) {
  const before = await backendCpu(admin);
  const t0 = performance.now();
  const rows = await Promise.all(
    services.map((s, i) =>
      measureStep(s, {
        rate: rate / services.length,
        seconds: o.seconds,
        rampSeconds: o.ramp,
        connections: o.connections,
        timeoutMs: 1000,
        source: cyclingSource(`replica ${i + 1}`, parts[i]!),
      }).catch((err: unknown) => {
        throw explainFailure(s, err);
      }),
    ),
  );
  const window = (performance.now() - t0) / 1000;
  const afterCpu = await backendCpu(admin);
  const dbCpuS = cpuDelta(before, afterCpu);
  const replicas = rows.map((r, i) => phaseRow(i + 1, r));
  const total = replicas.reduce((a, r) => a + r.achieved_rps, 0);
  return {
    replicas,
    total_achieved_rps: total,
    // Ramp and measured window together: the backends served both.
    database_cpu_cores: Math.round((dbCpuS / window) * 100) / 100,
    database_cpu_ms_per_call:
      total > 0 ? Math.round(((dbCpuS * 1000) / (total * window)) * 1000) / 1000 : null,
  };
}

/** Top-10 overlap of PostgreSQL's cold search with the embedded store's on the same queries. */
async function overlap(store: PgStore, embedded: EmbeddedStore, reqs: AssembleContextRequestInput[]) {
  let compared = 0;
  let bothEmpty = 0;
  let sum = 0;
  let identicalTop1 = 0;
  for (const r of reqs) {
    const a = await store.search(r.org_id!, r.agent_id!, r.query ?? '', { timeoutMs: 5000 });
    const b = embedded.search(r.org_id!, r.agent_id!, r.query ?? '');
    if (a.length === 0 && b.length === 0) {
      bothEmpty++;
      continue;
    }
    const ids = new Set(b.map((h) => h.memory.id));
    sum += a.filter((h) => ids.has(h.memory.id)).length / Math.max(a.length, b.length);
    if (a[0]?.memory.id === b[0]?.memory.id) identicalTop1++;
    compared++;
  }
  return {
    queries: reqs.length,
    both_empty: bothEmpty,
    mean_top10_overlap: compared > 0 ? Math.round((sum / compared) * 1000) / 1000 : null,
    same_top1_share: compared > 0 ? Math.round((identicalTop1 / compared) * 1000) / 1000 : null,
  };
}

/**
 * Recall@10 of LoCoMo's QA evidence (the turns that answer each question) for both stores' cold search,
 * with the question as the query: a ground truth, where the overlap above only compares the two.
 */
async function evidenceRecall(store: PgStore, embedded: EmbeddedStore, conversations: LocomoConversation[]) {
  let questions = 0;
  let pgSum = 0;
  let embeddedSum = 0;
  for (const conv of conversations) {
    const byDia = new Map(conv.sessions.flatMap((s) => s.turns.map((t) => [t.diaId, t.memoryId] as const)));
    for (const qa of conv.qa) {
      const evidence = qa.evidence.flatMap((e) => byDia.get(e) ?? []);
      if (evidence.length === 0) continue;
      const recall = (ids: string[]) => evidence.filter((e) => ids.includes(e)).length / evidence.length;
      const a = await store.search(LOCOMO_ORG_ID, conv.agentId, qa.question, { timeoutMs: 5000 });
      pgSum += recall(a.map((h) => h.memory.id));
      embeddedSum += recall(
        embedded.search(LOCOMO_ORG_ID, conv.agentId, qa.question).map((h) => h.memory.id),
      );
      questions++;
    }
  }
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return {
    questions,
    postgres_recall_at_10: questions > 0 ? r3(pgSum / questions) : null,
    embedded_recall_at_10: questions > 0 ? r3(embeddedSum / questions) : null,
  };
}

async function main(): Promise<number> {
  const flags = stringFlags(
    'rate',
    'seconds',
    'ramp-seconds',
    'connections',
    'threads',
    'pool-max',
    'overlap-queries',
    'locomo',
    'pg-url',
    'out',
  );
  const v = benchOptions(process.argv.slice(2), USAGE, flags, (values) => values);
  if (typeof v === 'number') return v;
  const rate = parseNumber('--rate', v.rate ?? '400');
  const seconds = parseNumber('--seconds', v.seconds ?? '10');
  const ramp = parseNumber('--ramp-seconds', v['ramp-seconds'] ?? '2', true);
  const connections = parseNumber('--connections', v.connections ?? '4');
  const threads = parseNumber('--threads', v.threads ?? '1');
  const poolMax = parseNumber('--pool-max', v['pool-max'] ?? '8');
  const overlapQueries = parseNumber('--overlap-queries', v['overlap-queries'] ?? '500');
  const locomo = v.locomo ?? projectPath('../shared/datasets/locomo10');
  if (!existsSync(locomo)) throw new Error(`LoCoMo not found at ${locomo}: pass --locomo <dir>`);
  const url = v['pg-url'] ?? process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const out = v.out ?? projectPath('bench/results');
  const schema = `ibex_bench_replicas_${randomBytes(4).toString('hex')}`;

  const conversations = await readLocomo(locomo);
  const requests = locomoRequests(conversations).map((r) => r.request);
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const store = await PgStore.open({ url, schema, poolMax: 2 });
  const dir = tempDir('ibex-bench-replicas-');
  const embedded = EmbeddedStore.open(path.join(dir, 'store.db'));
  const services: ServiceProcess[] = [];
  try {
    const summary = await ingestLocomoPostgres(store, conversations, LOCOMO_ORG_ID);
    ingestLocomo(embedded, conversations, LOCOMO_ORG_ID);
    console.error(`ingested ${summary.memories} memories of ${summary.agents.length} agents into ${schema}`);
    const step = Math.max(1, Math.floor(requests.length / overlapQueries));
    const quality = await overlap(
      store,
      embedded,
      requests.filter((_, i) => i % step === 0).slice(0, overlapQueries),
    );
    console.error(`top-10 overlap with the embedded store: ${JSON.stringify(quality)}`);
    const evidence = await evidenceRecall(store, embedded, conversations);
    console.error(`QA evidence recall@10: ${JSON.stringify(evidence)}`);

    const env = {
      IBEX_CONTEXT_POSTGRES_URL: url,
      IBEX_CONTEXT_POSTGRES_SCHEMA: schema,
      IBEX_CONTEXT_POSTGRES_POOL_MAX: String(poolMax),
      IBEX_CONTEXT_POOL_MIN_THREADS: String(threads),
      IBEX_CONTEXT_POOL_MAX_THREADS: String(threads),
    };
    for (let i = 0; i < 2; i++)
      services.push(await startServiceProcess({ db: path.join(dir, `unused-${i}.db`), env }));
    const o = { seconds, ramp, connections };
    console.error(`one replica: ${rate} rps for ${seconds} s`);
    const one = await runPhase([services[0]!], [requests], rate, o, admin);
    const halves = [requests.filter((_, i) => i % 2 === 0), requests.filter((_, i) => i % 2 === 1)];
    console.error(`two replicas: ${rate / 2} rps each for ${seconds} s`);
    const two = await runPhase(services, halves, rate, o, admin);

    const result = {
      bench: 'replicas',
      note: 'shared machine: driver, both replicas and PostgreSQL on the same cores; figures, not gates',
      machine: machineInfo(),
      options: { rate, seconds, ramp_seconds: ramp, connections, threads, pool_max: poolMax },
      data: { memories: summary.memories, agents: summary.agents.length, requests: requests.length },
      one_replica: one,
      two_replicas: two,
      cold_search_vs_embedded: quality,
      qa_evidence_recall: evidence,
    };
    mkdirSync(out, { recursive: true });
    writeFileSync(path.join(out, 'replicas.json'), `${JSON.stringify(result, null, 2)}\n`);
    const cells = ({ warnings: _w, errors_by_code: _e, ...r }: PhaseRow) => r;
    console.table([
      ...one.replicas.map((r) => ({ phase: 'one', ...cells(r) })),
      ...two.replicas.map((r) => ({ phase: 'two', ...cells(r) })),
    ]);
    console.log(
      `database CPU: one replica ${one.database_cpu_cores} cores (${one.database_cpu_ms_per_call} ms/call), ` +
        `two replicas ${two.database_cpu_cores} cores (${two.database_cpu_ms_per_call} ms/call)`,
    );
    console.log(`wrote ${path.join(out, 'replicas.json')}`);
    return 0;
  } finally {
    await Promise.allSettled(services.map((s) => s.stop()));
    embedded.close();
    await store.close();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await admin.end();
  }
}

runBenchMain(main, { exit: true });
