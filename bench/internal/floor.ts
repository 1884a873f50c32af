/**
 * `npm run bench:internal -- floor [--locomo <dir>] [--rate 1000] [--seconds 20] [--warmup-seconds 30]
 * [--connections 4] [--rounds 5] [--out <dir>]`: what the CPU target (≤ 1.0 ms per call over all
 * the server's threads) leaves for the service's own work once the libraries it is built on have had
 * their share, measured on this machine in one run. Figures, not gates. Writes bench/results/floor.json.
 *
 * Three floors, each the least a call of `bench:load` costs in one part; the first two are libraries', the
 * third the service's own core work measured alone:
 * - **gRPC**: a grpc-js server in a child process (node started with the service's flags, node-flags.ts)
 *   with the service's own definition and `grpc.enable_channelz: 0` (the service's other channel options
 *   are keepalive, connection-age and size limits), answering every AssembleContext with one canned answer
 *   of a LoCoMo answer's size (a 12,000-character context and 30 rows, 14.7 KB encoded), driven by the
 *   load driver (`frames`, open loop) at `--rate` with the LoCoMo requests; server CPU per call from
 *   `/proc/<pid>/task/*`, after `--warmup-seconds` of the same traffic. Two forms:
 *   `codec` decodes each request and encodes the answer with the proto-loader serializers (what a plain
 *   grpc-js service pays), `bytes` skips both (the transport alone: request bytes handed over as they are,
 *   the answer's bytes encoded once).
 * - **Search**: the embedded store's FTS5 search (the SQL statement and its rows, in-process, no read
 *   cache) for every LoCoMo request's query, µs per query; `--rounds` passes over them, median pass. Also,
 *   not in the sum: where a search's time goes and a rowid-range alternative (`searchBreakdown`,
 *   lib/search-floor.ts), and the same searches one per message 1 ms apart in a thread of their own
 *   (sleeping, then spinning between messages), which is how the store-read thread gets them.
 * - **CPU stage**: one whole CPU task over 30 LoCoMo-sized turns (bench:pack's shape, `runCpuTask`), p50;
 *   `--rounds` rounds, median.
 *
 * gRPC + search (one sum per gRPC form) is what a call costs before any code of the service's runs; with
 * the CPU task added, what it costs with nothing around the three: no validation, retrieval
 * orchestration, thread round-trips, scoring, metrics or logging. The CPU task's shape fits its budget
 * (no choice for the packer): under `bench:load`'s budget mix half the tasks pack under a budget, and
 * the pool thread's mean task there is longer. The service decodes
 * requests on the wire and splices its answers (grpc-server.ts), so its own gRPC share lies between the
 * two forms.
 */
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  isMainThread,
  MessageChannel,
  type MessagePort,
  receiveMessageOnPort,
  Worker,
  workerData,
} from 'node:worker_threads';
import { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { stringFlags } from '../../src/tools/cli/command-args.js';
import { runLoad } from '../../src/tools/client/load-driver.js';
import { median } from '../../src/tools/client/stats.js';
import { type CpuTaskRow, cpuTaskFigures } from '../cpu-task-heavy.js';
import { GRPC_FORMS, type GrpcForm, startBareGrpcServer } from '../lib/bare-grpc.js';
import {
  type BenchFlagValues,
  benchOptions,
  machineInfo,
  parseInteger,
  parseNumber,
  runBenchMain,
} from '../lib/bench-run.js';
import { benchLoadData } from '../lib/load-data.js';
import { projectPath, writeResultFile } from '../lib/paths.js';
import { readThreads, threadCpuStep } from '../lib/thread-cpu.js';
import { searchBreakdown, searchPasses } from './lib/search-floor.js';

/** Warm-up of each gRPC form when `--warmup-seconds 0` is given, s: the connections' first calls. */
const MIN_WARMUP_S = 0.5;

/** The target: server CPU per call over all its threads, ms. */
export const TARGET_MS_PER_CALL = 1.0;

/** The per-call sums of the floors with one form of the gRPC floor, and what they leave of the target, ms. */
export interface FloorSum {
  grpc_form: GrpcForm;
  grpc_ms: number;
  search_ms: number;
  cpu_stage_ms: number;
  /** gRPC + search: the libraries' share, which no code of the service's can remove. */
  libraries_ms: number;
  /** {@link TARGET_MS_PER_CALL} minus the libraries' share: all the service's own work must fit in it. */
  left_for_the_service_ms: number;
  /** What is left once the CPU task itself (the service's own core work, measured alone) is paid too. */
  left_after_the_cpu_task_ms: number;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * Sums the floors.
 * @param grpcMs server CPU per call of the `form` gRPC floor, ms; `searchUs` µs per query; `cpuStageMs` ms
 *   per task.
 */
export function floorSum(form: GrpcForm, grpcMs: number, searchUs: number, cpuStageMs: number): FloorSum {
  const libraries = grpcMs + searchUs / 1000;
  return {
    grpc_form: form,
    grpc_ms: r3(grpcMs),
    search_ms: r3(searchUs / 1000),
    cpu_stage_ms: r3(cpuStageMs),
    libraries_ms: r3(libraries),
    left_for_the_service_ms: r3(TARGET_MS_PER_CALL - libraries),
    left_after_the_cpu_task_ms: r3(TARGET_MS_PER_CALL - libraries - cpuStageMs),
  };
}

/** What the paced search thread is given (see {@link pacedSearch}). */
interface PacedSearchData {
  db: string;
  queries: { org: string; agent: string; text: string }[];
  spin: boolean;
}

/**
 * Worker side of {@link pacedSearch}: one search per message, its own time back (µs). Between messages it
 * sleeps in its event loop, or with `spin` polls its port without sleeping.
 */
function pacedSearchThread(data: PacedSearchData, port: MessagePort): void {
  const store = EmbeddedStore.open(data.db, { cache: false });
  const searchOne = (i: number) => {
    const q = data.queries[(i * 7) % data.queries.length]!;
    const start = performance.now();
    store.search(q.org, q.agent, q.text);
    port.postMessage((performance.now() - start) * 1000);
  };
  // Loaded and connected: the pacing starts now, not while this thread was still importing.
  port.postMessage('ready');
  if (!data.spin) {
    port.on('message', (i: number) => (i < 0 ? port.close() : searchOne(i)));
    return;
  }
  for (;;) {
    const m = receiveMessageOnPort(port);
    if (m === undefined) continue;
    if ((m.message as number) < 0) break;
    searchOne(m.message as number);
  }
  port.close();
}

/**
 * The same searches one at a time, 1 ms apart, in a thread of their own (as the store-read thread gets them
 * at ~1,000 req/s): mean µs per search over `count` of them after 500 unmeasured ones. A search woken for
 * alone finds colder caches than one of a back-to-back pass; `spin` keeps the thread running in between.
 */
async function pacedSearch(data: PacedSearchData, count: number): Promise<number> {
  const { port1, port2 } = new MessageChannel();
  const worker = new Worker(new URL(import.meta.url), {
    workerData: { ...data, port: port2 },
    transferList: [port2],
  });
  const times: number[] = [];
  const ready = new Promise<void>((resolve) => port1.once('message', () => resolve()));
  try {
    await ready;
    port1.on('message', (us: number) => times.push(us));
    for (let i = 0; i < 500 + count; i++) {
      port1.postMessage(i);
      await sleep(1);
    }
    while (times.length < 500 + count) await sleep(5);
    port1.postMessage(-1);
    const measured = times.slice(500);
    return r3(measured.reduce((sum, us) => sum + us, 0) / measured.length);
  } finally {
    port1.close();
    await worker.terminate();
  }
}

const USAGE = `usage: npm run bench:internal -- floor [options]

  --locomo <dir>          ingest and drive LoCoMo turns (default: generated LoCoMo-shaped data)
  --rate <n>              requests/s of the gRPC floor's load (default 1000)
  --seconds <n>           measured seconds per gRPC form (default 20)
  --warmup-seconds <n>    unmeasured load before each form (default 30; 0 = ${MIN_WARMUP_S} s)
  --connections <n>       gRPC connections of the driver (default 4)
  --rounds <n>            search passes and CPU-task rounds, median taken (default 5)
  --out <dir>             where floor.json goes (default bench/results)`;

const FLAGS = stringFlags('locomo', 'rate', 'seconds', 'warmup-seconds', 'connections', 'rounds', 'out');

/** The bench's options, resolved. @throws Error naming a bad flag. */
function parseOptions(values: BenchFlagValues<typeof FLAGS>) {
  return {
    locomo: values.locomo,
    rate: parseNumber('--rate', values.rate ?? '1000'),
    seconds: parseNumber('--seconds', values.seconds ?? '20'),
    warmupS: parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '30', true),
    connections: parseInteger('--connections', values.connections ?? '4'),
    rounds: parseInteger('--rounds', values.rounds ?? '5'),
    out: path.resolve(values.out ?? projectPath('bench/results')),
  };
}

async function main(argv: string[]): Promise<number> {
  const opts = benchOptions(argv, USAGE, FLAGS, parseOptions);
  if (typeof opts === 'number') return opts;
  const { rate, seconds, warmupS, connections, rounds, out } = opts;
  const { db, data } = await benchLoadData('ibex-floor-', opts.locomo);

  const queries = (data.source.requests ?? []).map((r) => ({
    org: r.org_id ?? '',
    agent: r.agent_id ?? '',
    text: r.query ?? '',
  }));
  const search = searchPasses(db, queries, rounds);
  const searchUs = median(search.passes);
  console.error(`search: ${searchUs.toFixed(1)} µs per query (passes ${search.passes.join(' / ')})`);
  const breakdown = searchBreakdown(db, queries, rounds);
  console.error(
    `search breakdown (µs per query): finding the matches ${breakdown.matches_us}, ranking them ` +
      `${breakdown.ranked_us}, the store's statement ${breakdown.store_us}; by rowid range instead of the ` +
      `scope token ${breakdown.rowid_range_us} (same top-10 for ${breakdown.range_top10_same} of ` +
      `${breakdown.queries} queries)`,
  );
  const paced = await pacedSearch({ db, queries, spin: false }, 1500);
  const pacedSpinning = await pacedSearch({ db, queries, spin: true }, 1500);
  console.error(
    `search one at a time, 1 ms apart, in a thread of its own: ${paced} µs per query (the thread spinning ` +
      `in between: ${pacedSpinning} µs)`,
  );
  const taskP50s: number[] = [];
  let locomoTask: CpuTaskRow | undefined;
  for (let r = 0; r < rounds; r++) {
    locomoTask = (await cpuTaskFigures(1000)).find((row) => row.shape.includes('LoCoMo'))!;
    taskP50s.push(locomoTask.p50_ms);
  }
  const cpuStageMs = median(taskP50s);
  console.error(
    `CPU stage: ${cpuStageMs} ms per task (p50 per round ${taskP50s.join(' / ')}, ${locomoTask!.shape})`,
  );

  const grpc: Record<string, unknown>[] = [];
  for (const form of GRPC_FORMS) {
    const { port, child } = await startBareGrpcServer(form);
    try {
      const common = { addr: `127.0.0.1:${port}`, rate, connections, transport: 'h2' as const };
      await runLoad({ ...common, durationS: warmupS || MIN_WARMUP_S, source: data.source });
      const before = readThreads(child.pid!);
      const report = await runLoad({ ...common, durationS: seconds, source: data.source });
      const after = readThreads(child.pid!);
      const calls = report.requests.completed;
      const step = before && after ? threadCpuStep(before, after, report.duration_s, calls) : null;
      if (step?.ms_per_call == null) {
        throw new Error(`no CPU figure for the ${form} gRPC server (did it exit, or is /proc unreadable?)`);
      }
      const row = {
        form,
        achieved_rps: report.throughput_rps,
        errors: report.requests.error_total,
        p50_ms: report.latency_ms.p50,
        p99_ms: report.latency_ms.p99,
        server_ms_per_call: step?.ms_per_call ?? null,
      };
      grpc.push(row);
      console.error(
        `gRPC ${form}: ${row.server_ms_per_call?.total} ms server CPU per call (main ` +
          `${row.server_ms_per_call?.main}, other ${row.server_ms_per_call?.other}) at ${row.achieved_rps} ` +
          `req/s, p99 ${row.p99_ms} ms, errors ${row.errors}`,
      );
    } finally {
      child.kill('SIGTERM');
    }
  }
  const sums = grpc.flatMap((g) => {
    const perCall = g.server_ms_per_call as { total: number } | null;
    return perCall ? [floorSum(g.form as GrpcForm, perCall.total, searchUs, cpuStageMs)] : [];
  });
  const result = {
    generated_at: new Date().toISOString(),
    node: process.version,
    machine: machineInfo(),
    config: {
      data: data.kind,
      rate,
      seconds,
      warmup_seconds: warmupS || MIN_WARMUP_S,
      connections,
      rounds,
      transport: 'h2',
    },
    target_ms_per_call: TARGET_MS_PER_CALL,
    grpc,
    search: {
      us_per_query_median: r3(searchUs),
      queries: queries.length,
      ...search,
      breakdown,
      paced_us_per_query: paced,
      paced_spinning_us_per_query: pacedSpinning,
    },
    cpu_stage: { ms_per_task_median: cpuStageMs, p50_per_round: taskP50s, shape: locomoTask!.shape },
    floor: sums,
  };
  const file = writeResultFile(path.join(out, 'floor.json'), result);
  for (const sum of sums) {
    console.log(
      `gRPC ${sum.grpc_form}: gRPC ${sum.grpc_ms} + search ${sum.search_ms} = ${sum.libraries_ms} ms per call; ` +
        `the ${TARGET_MS_PER_CALL} ms target leaves ${sum.left_for_the_service_ms} ms for all the service's own ` +
        `work, ${sum.left_after_the_cpu_task_ms} ms once the CPU task (${sum.cpu_stage_ms} ms) is paid`,
    );
  }
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
  return 0;
}

if (!isMainThread) {
  const { port, ...data } = workerData as PacedSearchData & { port: MessagePort };
  pacedSearchThread(data, port);
} else runBenchMain(() => main(process.argv.slice(2)));
