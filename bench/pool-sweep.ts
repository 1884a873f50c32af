/**
 * `npm run bench:pool-sweep [-- --rate <rps>] [--threads 1,2,3,4] [--seconds 10]`: the same open-loop
 * load at one fixed rate against a fresh service per pool size (`IBEX_CONTEXT_POOL_MIN_THREADS` =
 * `IBEX_CONTEXT_POOL_MAX_THREADS` = 1, 2, 3, 4), to see what extra worker threads buy or cost on this
 * machine: throughput, p50/p99, the server's event-loop delay, pool busy ratio, wait and run, errors and
 * degraded answers.
 *
 * The rate defaults to 70 % of the highest clean rate in bench/results/load.json (rounded down to 50
 * rps), or 500 rps when there is no such file or rate; `--rate` sets it. Writes
 * bench/results/pool-sweep.json and bench/results/pool-sweep.svg (p99 and event-loop delay p99 against
 * the thread count).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { machineInfo, parseEnvPairs, parseList, parseNumber, tempDir } from './lib/bench-run.js';
import { prepareLoadData } from './lib/load-data.js';
import { measureStep, type StepRow, tableCells } from './lib/load-step.js';
import { projectPath } from './lib/paths.js';
import { writeLineChart } from './lib/plot.js';
import { explainFailure, startServiceProcess } from './lib/service-process.js';

/** Rate when neither `--rate` nor a clean rate in load.json says otherwise, rps. */
const FALLBACK_RATE = 200;
/** Share of the highest clean rate of bench:load the sweep runs at. */
const SHARE_OF_CLEAN_RATE = 0.7;

const USAGE = `usage: npm run bench:pool-sweep -- [options]
  --rate <rps>            offered rate (default: ${SHARE_OF_CLEAN_RATE * 100} % of the clean rate in bench/results/load.json, else ${FALLBACK_RATE})
  --threads <n1,n2,…>     pool sizes, one fresh service each (default 1,2,3,4)
  --seconds <s>           measured seconds per pool size (default 10)
  --warmup-seconds <s>    unrecorded load at the same rate after each start (default 3)
  --locomo <dir>          ingest and drive LoCoMo turns (default: generated LoCoMo-shaped data)
  --connections <n>       gRPC channels of the driver (default 10)
  --timeout <ms>          per-call gRPC deadline of the client (default 1000)
  --service-env <K=V>     extra IBEX_CONTEXT_* setting of the service (repeatable)
  --out <dir>             where pool-sweep.json and pool-sweep.svg go (default bench/results)`;

interface Options {
  rate: number;
  rateSource: string;
  threads: number[];
  seconds: number;
  warmupSeconds: number;
  locomo: string | undefined;
  connections: number;
  timeoutMs: number;
  serviceEnv: Record<string, string>;
  out: string;
}

/** The default rate and where it came from. */
function defaultRate(): { rate: number; source: string } {
  const file = projectPath('bench/results/load.json');
  if (existsSync(file)) {
    try {
      const best = (JSON.parse(readFileSync(file, 'utf8')) as { best?: { rate?: number | null } }).best;
      if (typeof best?.rate === 'number' && best.rate > 0) {
        const rate = Math.max(50, Math.floor((best.rate * SHARE_OF_CLEAN_RATE) / 50) * 50);
        return {
          rate,
          source: `${SHARE_OF_CLEAN_RATE * 100} % of the ${best.rate} rps clean rate in bench/results/load.json`,
        };
      }
    } catch {
      // Unreadable results: fall through to the fixed default.
    }
  }
  return { rate: FALLBACK_RATE, source: 'fixed default (no clean rate in bench/results/load.json)' };
}

function parseOptions(argv: string[]): Options | null {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      rate: { type: 'string' },
      threads: { type: 'string' },
      seconds: { type: 'string' },
      'warmup-seconds': { type: 'string' },
      locomo: { type: 'string' },
      connections: { type: 'string' },
      timeout: { type: 'string' },
      'service-env': { type: 'string', multiple: true },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return null;
  const connections = parseNumber('--connections', values.connections ?? '10');
  if (!Number.isInteger(connections)) throw new Error('--connections must be an integer');
  const fallback = values.rate === undefined ? defaultRate() : undefined;
  return {
    rate: fallback ? fallback.rate : parseNumber('--rate', values.rate!),
    rateSource: fallback ? fallback.source : '--rate',
    threads: parseList('--threads', values.threads ?? '1,2,3,4'),
    seconds: parseNumber('--seconds', values.seconds ?? '10'),
    warmupSeconds: parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '3', true),
    locomo: values.locomo,
    connections,
    timeoutMs: parseNumber('--timeout', values.timeout ?? '1000'),
    serviceEnv: parseEnvPairs(values['service-env'] ?? []),
    out: path.resolve(values.out ?? projectPath('bench/results')),
  };
}

async function main(argv: string[]): Promise<number> {
  let opts: Options | null;
  try {
    opts = parseOptions(argv);
  } catch (err) {
    console.error(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  if (opts === null) {
    console.log(USAGE);
    return 0;
  }
  const db = path.join(tempDir('ibex-bench-pool-sweep-'), 'bench.db');
  const data = await prepareLoadData(db, opts.locomo);
  console.error(
    `data: ${data.kind}: ${data.agents} agents, ${data.memories} memories, ${data.requests} requests`,
  );
  console.error(`rate: ${opts.rate} rps (${opts.rateSource})`);

  const rows: (StepRow & { threads: number })[] = [];
  for (const threads of opts.threads) {
    const env = {
      ...opts.serviceEnv,
      IBEX_CONTEXT_POOL_MIN_THREADS: String(threads),
      IBEX_CONTEXT_POOL_MAX_THREADS: String(threads),
    };
    const service = await startServiceProcess({ db, env });
    try {
      const row = await measureStep(service, {
        rate: opts.rate,
        seconds: opts.seconds,
        rampSeconds: opts.warmupSeconds,
        connections: opts.connections,
        timeoutMs: opts.timeoutMs,
        source: data.source,
      });
      rows.push({ threads, ...row });
      console.error(
        `${threads} thread(s): achieved ${row.achieved_rps}, p50 ${row.p50_ms} ms, p99 ${row.p99_ms} ms, ` +
          `event-loop delay p99 ${row.server.event_loop_delay_ms.p99} ms, errors ${row.errors}, ` +
          `degraded ${row.degraded}${row.driver.limited ? ' [driver-limited]' : ''}`,
      );
    } catch (err) {
      throw explainFailure(service, err);
    } finally {
      await service.stop();
    }
  }

  const result = {
    generated_at: new Date().toISOString(),
    node: process.version,
    machine: machineInfo(),
    config: {
      rate: opts.rate,
      rate_source: opts.rateSource,
      threads: opts.threads,
      seconds: opts.seconds,
      warmup_seconds: opts.warmupSeconds,
      connections: opts.connections,
      timeout_ms: opts.timeoutMs,
      service_env: opts.serviceEnv,
      driver: 'in the bench process (one thread), service in a child process',
    },
    data: { kind: data.kind, agents: data.agents, memories: data.memories, requests: data.requests },
    runs: rows,
  };
  mkdirSync(opts.out, { recursive: true });
  const jsonFile = path.join(opts.out, 'pool-sweep.json');
  writeFileSync(jsonFile, `${JSON.stringify(result, null, 2)}\n`);

  const series = [
    { name: 'p50', points: rows.map((r) => ({ x: r.threads, y: r.p50_ms })) },
    { name: 'p99', points: rows.map((r) => ({ x: r.threads, y: r.p99_ms })) },
    {
      name: 'server event-loop delay p99',
      points: rows.map((r) => ({ x: r.threads, y: r.server.event_loop_delay_ms.p99 })),
    },
  ];
  const ys = series.flatMap((s) => s.points.map((p) => p.y)).filter((y) => y > 0);
  // A log axis only when the values span more than a decade and a half; otherwise linear reads better.
  const yLog = ys.length > 0 && Math.max(...ys) / Math.min(...ys) > 30;
  const svgFile = path.join(opts.out, 'pool-sweep.svg');
  await writeLineChart(svgFile, {
    title: `Latency and event-loop delay against pool threads at ${opts.rate} rps (open loop)`,
    subtitle: `${data.kind.split('(')[0]} data, ${result.machine.cpus} CPUs shared by server and driver, ${opts.seconds} s per pool size`,
    xTitle: 'pool threads (min = max)',
    yTitle: yLog ? 'ms (log scale)' : 'ms',
    yLog,
    xTicksAtData: true,
    series,
  });

  console.table(
    Object.fromEntries(
      rows.map((r) => [
        `${r.threads} thr`,
        {
          ...tableCells(r),
          'busy %': Math.round(r.server.pool_busy_ratio * 1000) / 10,
          'util gauge': r.server.pool_utilization_gauge,
        },
      ]),
    ),
  );
  console.log(
    `offered ${opts.rate} rps. latencies ms (client, from the intended send time); srv = server handler mean; ` +
      'wait/run = pool means; eld = server event-loop delay; cpu in cores (main thread in parentheses); ' +
      'busy % = pool run time / (window × threads); util gauge = the service’s utilization moving average',
  );
  for (const r of rows) {
    if (r.driver.limited)
      console.log(
        `note: with ${r.threads} thread(s) the driver was saturated or late; that run measures it too`,
      );
  }
  console.log(`wrote ${path.relative(process.cwd(), jsonFile)} and ${path.relative(process.cwd(), svgFile)}`);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.exitCode = 1;
  },
);
