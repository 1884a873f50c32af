/**
 * `npm run bench:replicas [-- --rates 50,100,200 --seconds 4 --locomo <dir> --pg-url <url>]`: the
 * PostgreSQL store under load, against the embedded store in the same run, on LoCoMo with the budget mix.
 *
 * LoCoMo is ingested into a fresh schema (ANALYZEd by the ingest) and into a temporary embedded store.
 * Five service children start: one on the embedded store, two on PostgreSQL directly, two through a
 * PgBouncer in transaction pooling mode (started on a free loopback port when the binary is there; its
 * LISTEN goes direct). Then the driver (this process) is pinned to one CPU with `taskset` (`--driver-cpu`):
 * the children were started before, so they keep every CPU.
 *
 * Each configuration is ramped over `--rates` (open loop, latency from the intended send time —
 * bench/lib/load-step.ts) until a step is not clean; clean = 0 errors, p99 ≤ 20 ms, ≥ 99 % of answers L0.
 * The highest clean rate of one PostgreSQL replica is compared with the embedded store's. Per step:
 * database CPU per call (the CPU seconds of this database's `ibex-context` backends, from
 * `/proc/<pid>/stat` of the pids pg_stat_activity names: the same machine only).
 *
 * After each one-replica ramp, one call at a time (closed loop, one connection) for `--seconds`: the p99
 * no offered rate can beat, so a clean rate needs it under 20 ms.
 *
 * Recovery (one direct replica, at its clean rate R, or the lowest rate when none was clean): 10 s at 3 R,
 * then 1 s steps at R until one is all-L0 with no error; and the same after every backend of the replicas
 * is terminated (pg_terminate_backend, the stand-in for a database restart on a shared server). Seconds to
 * full L0 and connections the replica opened are recorded.
 *
 * Also the top-10 overlap of PostgreSQL's cold search with the embedded store's and both stores'
 * recall@10 of LoCoMo's QA evidence turns. Writes bench/results/replicas.json. Figures, not gates: on a
 * shared two-core machine the driver, replicas and PostgreSQL compete for the same cores.
 */

import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { PgStore } from '../src/retrieval/postgres/pg-store.js';
import { EmbeddedStore } from '../src/retrieval/sqlite/embedded-store.js';
import { stringFlags } from '../src/tools/cli/command-args.js';
import { locomoRequests } from '../src/tools/client/locomo-requests.js';
import { cyclingSource } from '../src/tools/client/request-source.js';
import { LOCOMO_ORG_ID, readLocomo } from '../src/tools/locomo/dataset.js';
import { ingestLocomo } from '../src/tools/locomo/ingest.js';
import type { AssembleContextRequestInput } from '../src/wire/proto.js';
import { benchOptions, machineInfo, parseNumber, runBenchMain, tempDir } from './lib/bench-run.js';
import { measureStep, type StepRow } from './lib/load-step.js';
import { projectPath, writeResultFile } from './lib/paths.js';
import { backendCpu, cpuDelta } from './lib/pg-backend-cpu.js';
import { evidenceRecall, overlap } from './lib/pg-search-quality.js';
import { type PgBouncer, pgbouncerBinary, startPgBouncer } from './lib/pgbouncer.js';
import { recovery } from './lib/replica-recovery.js';
import { explainFailure, type ServiceProcess, startServiceProcess } from './lib/service-process.js';

const USAGE = `usage: npm run bench:replicas -- [options]
  --rates <list>        offered rates of the ramp, calls/s, split across the replicas (default 50,100,150,200,300,400)
  --seconds <s>         measured seconds per step (default 4)
  --ramp-seconds <s>    unrecorded seconds before each step (default 1)
  --connections <n>     gRPC channels per replica (default 4)
  --threads <n>         pool threads per replica (default 1)
  --pool-max <n>        PostgreSQL connections per replica (default 8)
  --driver-cpu <n>      CPU the driver is pinned to with taskset (default the last one; -1 = not pinned)
  --overlap-queries <n> LoCoMo queries compared for the top-10 overlap (default 500)
  --locomo <dir>        LoCoMo directory (default ../shared/datasets/locomo10 when present)
  --pg-url <url>        database (default PG_URL or postgres://postgres@127.0.0.1:5432/test)
  --out <dir>           where replicas.json goes (default bench/results)`;

/** The clean-rate rule of the figures. */
const P99_TARGET_MS = 20;
const L0_SHARE_MIN = 0.99;

interface PhaseRow {
  replica: number;
  offered_rps: number;
  achieved_rps: number;
  p50_ms: number;
  p99_ms: number;
  errors: number;
  errors_by_code: Record<string, number>;
  degraded: number;
  /** Share of all calls answered OK at L0. */
  l0_share: number;
  server_cpu_cores: number | null;
  /** The driver's own loop was saturated or late (then latencies include driver time). */
  driver_limited: boolean;
  /** Cores busy beyond the servers and the driver: other processes on a shared machine. */
  other_processes_cores: number | null;
  warnings: string[];
}

/** Share of the step's calls answered OK at L0 (`seconds`: the measured window). */
function l0Share(row: StepRow, seconds: number): number {
  const calls = row.achieved_rps * seconds;
  if (calls <= 0) return 0;
  return Math.round(Math.max(0, (row.ok_rps * seconds - row.degraded) / calls) * 1000) / 1000;
}

function phaseRow(replica: number, row: StepRow, seconds: number): PhaseRow {
  return {
    replica,
    offered_rps: row.rate,
    achieved_rps: Math.round(row.achieved_rps),
    p50_ms: row.p50_ms,
    p99_ms: row.p99_ms,
    errors: row.errors,
    errors_by_code: row.errors_by_code,
    degraded: row.degraded,
    l0_share: l0Share(row, seconds),
    server_cpu_cores: row.server.cpu_cores?.total ?? null,
    driver_limited: row.driver.limited,
    other_processes_cores: row.other_processes_cores,
    warnings: row.warnings,
  };
}

/** `rate` split across the replicas, calls/s; null: closed loop, one call in flight per connection. */
async function runPhase(
  services: ServiceProcess[],
  parts: AssembleContextRequestInput[][],
  rate: number | null,
  o: { seconds: number; ramp: number; connections: number },
  admin: pg.Client,
) {
  const before = await backendCpu(admin);
  const t0 = performance.now();
  const rows = await Promise.all(
    services.map((s, i) =>
      measureStep(s, {
        rate: rate === null ? null : rate / services.length,
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
  const replicas = rows.map((r, i) => phaseRow(i + 1, r, o.seconds));
  const total = replicas.reduce((a, r) => a + r.achieved_rps, 0);
  const clean = replicas.every(
    (r) => r.errors === 0 && r.p99_ms <= P99_TARGET_MS && r.l0_share >= L0_SHARE_MIN,
  );
  return {
    offered_rps: rate,
    clean,
    replicas,
    total_achieved_rps: total,
    // Ramp and measured window together: the backends served both.
    database_cpu_cores: Math.round((dbCpuS / window) * 100) / 100,
    database_cpu_ms_per_call:
      total > 0 ? Math.round(((dbCpuS * 1000) / (total * window)) * 1000) / 1000 : null,
  };
}

type Phase = Awaited<ReturnType<typeof runPhase>>;

/**
 * One call at a time on one replica (closed loop, one connection): the p99 of calls that never wait for
 * one another, below which no offered rate's p99 can go on this machine.
 */
async function singleCall(
  service: ServiceProcess,
  requests: AssembleContextRequestInput[],
  o: { seconds: number; ramp: number },
  admin: pg.Client,
) {
  const phase = await runPhase([service], [requests], null, { ...o, connections: 1 }, admin);
  const row = phase.replicas[0]!;
  return {
    achieved_rps: row.achieved_rps,
    p50_ms: row.p50_ms,
    p99_ms: row.p99_ms,
    errors: row.errors,
    l0_share: row.l0_share,
    database_cpu_ms_per_call: phase.database_cpu_ms_per_call,
    below_clean_p99: row.p99_ms <= P99_TARGET_MS,
  };
}

/** Ramps `rates` until a step is not clean; returns every step and the highest clean rate (0: none). */
async function ramp(
  label: string,
  services: ServiceProcess[],
  parts: AssembleContextRequestInput[][],
  rates: number[],
  o: { seconds: number; ramp: number; connections: number },
  admin: pg.Client,
) {
  const steps: Phase[] = [];
  for (const rate of rates) {
    const step = await runPhase(services, parts, rate, o, admin);
    steps.push(step);
    const r = step.replicas;
    console.error(
      `${label} ${rate}/s: ${step.clean ? 'clean' : 'NOT clean'} · p99 ${r.map((x) => x.p99_ms).join('/')} ms · ` +
        `errors ${r.map((x) => x.errors).join('/')} · L0 ${r.map((x) => x.l0_share).join('/')} · ` +
        `db ${step.database_cpu_ms_per_call} ms/call`,
    );
    if (!step.clean) break;
  }
  const clean = steps.filter((st) => st.clean);
  return { clean_rate_rps: clean.at(-1)?.offered_rps ?? 0, steps };
}

/** Pins this process (every thread) to `cpu`; children started before keep their CPUs. */
function pinDriver(cpu: number): string {
  if (cpu < 0) return 'not pinned';
  try {
    execFileSync('taskset', ['-a', '-p', '-c', String(cpu), String(process.pid)], { stdio: 'ignore' });
    return `taskset -a -p -c ${cpu} (the driver only; replicas and PostgreSQL on every CPU)`;
  } catch {
    return 'not pinned (taskset failed)';
  }
}

async function main(): Promise<number> {
  const flags = stringFlags(
    'rates',
    'seconds',
    'ramp-seconds',
    'connections',
    'threads',
    'pool-max',
    'driver-cpu',
    'overlap-queries',
    'locomo',
    'pg-url',
    'out',
  );
  const v = benchOptions(process.argv.slice(2), USAGE, flags, (values) => values);
  if (typeof v === 'number') return v;
  const rates = (v.rates ?? '50,100,150,200,300,400').split(',').map((x) => parseNumber('--rates', x));
  const seconds = parseNumber('--seconds', v.seconds ?? '4');
  const rampS = parseNumber('--ramp-seconds', v['ramp-seconds'] ?? '1', true);
  const connections = parseNumber('--connections', v.connections ?? '4');
  const threads = parseNumber('--threads', v.threads ?? '1');
  const poolMax = parseNumber('--pool-max', v['pool-max'] ?? '8');
  const driverCpu = Number(v['driver-cpu'] ?? String(os.availableParallelism() - 1));
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
  const embeddedDb = path.join(dir, 'store.db');
  const embedded = EmbeddedStore.open(embeddedDb);
  const services: ServiceProcess[] = [];
  let bouncer: PgBouncer | undefined;
  try {
    const summary = await ingestLocomo(store, conversations, LOCOMO_ORG_ID, { db: `postgres:${schema}` });
    await ingestLocomo(embedded, conversations, LOCOMO_ORG_ID, { db: embeddedDb });
    console.error(`ingested ${summary.memories} memories of ${summary.agents.length} agents into ${schema}`);
    const step = Math.max(1, Math.floor(requests.length / overlapQueries));
    const quality = await overlap(
      store,
      embedded,
      requests.filter((_, i) => i % step === 0).slice(0, overlapQueries),
    );
    const evidence = await evidenceRecall(store, embedded, conversations);
    console.error(
      `top-10 overlap ${JSON.stringify(quality)}; QA evidence recall@10 ${JSON.stringify(evidence)}`,
    );

    const threadsEnv = {
      IBEX_CONTEXT_POOL_MIN_THREADS: String(threads),
      IBEX_CONTEXT_POOL_MAX_THREADS: String(threads),
    };
    const pgEnv = {
      ...threadsEnv,
      IBEX_CONTEXT_POSTGRES_URL: url,
      IBEX_CONTEXT_POSTGRES_SCHEMA: schema,
      IBEX_CONTEXT_POSTGRES_POOL_MAX: String(poolMax),
    };
    const embeddedService = await startServiceProcess({ db: embeddedDb, env: threadsEnv });
    services.push(embeddedService);
    for (let i = 0; i < 2; i++)
      services.push(await startServiceProcess({ db: path.join(dir, `unused-${i}.db`), env: pgEnv }));
    const direct = [services[1]!, services[2]!];
    let pooled: ServiceProcess[] = [];
    if (pgbouncerBinary()) {
      // Pool size 4 for 2 replicas × pool-max connections: the sizing docs/postgres.md describes.
      bouncer = await startPgBouncer({
        targetUrl: url,
        poolSize: 4,
        connectQuery: 'SET statement_timeout = 100',
      });
      const env = {
        ...pgEnv,
        IBEX_CONTEXT_POSTGRES_URL: bouncer.url,
        IBEX_CONTEXT_POSTGRES_TRANSACTION_POOLER: 'true',
        IBEX_CONTEXT_POSTGRES_LISTEN_URL: url,
      };
      for (let i = 0; i < 2; i++)
        services.push(await startServiceProcess({ db: path.join(dir, `unused-b${i}.db`), env }));
      pooled = [services[3]!, services[4]!];
    } else console.error('pgbouncer binary not found: the PgBouncer phase is skipped');
    // Read before pinning: the CPU count it reports follows this process's affinity.
    const machine = machineInfo();
    const pinned = pinDriver(driverCpu);
    console.error(`driver: ${pinned}`);

    const o = { seconds, ramp: rampS, connections };
    const halves = [requests.filter((_, i) => i % 2 === 0), requests.filter((_, i) => i % 2 === 1)];
    const embeddedOne = await ramp('embedded, one replica', [embeddedService], [requests], rates, o, admin);
    const embeddedSingle = await singleCall(embeddedService, requests, o, admin);
    console.error(`embedded, one call at a time: ${JSON.stringify(embeddedSingle)}`);
    await embeddedService.stop();
    const pgOne = await ramp('postgres, one replica', [direct[0]!], [requests], rates, o, admin);
    const pgSingle = await singleCall(direct[0]!, requests, o, admin);
    console.error(`postgres, one call at a time: ${JSON.stringify(pgSingle)}`);
    const pgTwo = await ramp('postgres, two replicas', direct, halves, rates, o, admin);
    const bouncerTwo =
      pooled.length > 0 ? await ramp('pgbouncer, two replicas', pooled, halves, rates, o, admin) : null;
    const recoveryRate = pgOne.clean_rate_rps > 0 ? pgOne.clean_rate_rps : rates[0]!;
    const recovered = await recovery(direct[0]!, requests, recoveryRate, connections, admin);

    const result = {
      bench: 'replicas',
      note:
        'shared machine (other work on the same 2 cores while measured): driver, replicas and PostgreSQL ' +
        'compete for the cores; figures, not gates',
      driver: pinned,
      clean_rule: { errors: 0, p99_ms_max: P99_TARGET_MS, l0_share_min: L0_SHARE_MIN },
      machine,
      options: { rates, seconds, ramp_seconds: rampS, connections, threads, pool_max: poolMax },
      data: { memories: summary.memories, agents: summary.agents.length, requests: requests.length },
      clean_rate_rps: {
        embedded_one_replica: embeddedOne.clean_rate_rps,
        postgres_one_replica: pgOne.clean_rate_rps,
        postgres_vs_embedded:
          embeddedOne.clean_rate_rps > 0
            ? Math.round((pgOne.clean_rate_rps / embeddedOne.clean_rate_rps) * 100) / 100
            : null,
        postgres_two_replicas_direct: pgTwo.clean_rate_rps,
        postgres_two_replicas_pgbouncer: bouncerTwo?.clean_rate_rps ?? null,
      },
      single_call: { embedded_one_replica: embeddedSingle, postgres_one_replica: pgSingle },
      embedded_one_replica: embeddedOne,
      postgres_one_replica: pgOne,
      postgres_two_replicas_direct: pgTwo,
      postgres_two_replicas_pgbouncer: bouncerTwo,
      recovery: recovered,
      cold_search_vs_embedded: quality,
      qa_evidence_recall: evidence,
    };
    writeResultFile(path.join(out, 'replicas.json'), result);
    console.log(JSON.stringify({ clean_rate_rps: result.clean_rate_rps, recovery: recovered }, null, 2));
    console.log(`wrote ${path.join(out, 'replicas.json')}`);
    return 0;
  } finally {
    await Promise.allSettled(services.map((s) => s.stop()));
    await bouncer?.stop();
    embedded.close();
    await store.close();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await admin.end();
  }
}

runBenchMain(main, { exit: true, driver: true });
