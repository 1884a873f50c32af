/**
 * `npm run bench:internal -- pool-sweep [-- --rates 50,100,200,400] [--threads 1,2,3,4] [--repeats 3]`: how many pool
 * threads to run. A grid: for every pool size (`IBEX_CONTEXT_POOL_MIN_THREADS` =
 * `IBEX_CONTEXT_POOL_MAX_THREADS`, one fresh service each) and every offered rate, the same open-loop load
 * `--repeats` times. Each grid cell reports the median of its repeats for achieved rate, p50, p99 and
 * server CPU per call, and the total errors and degraded answers over all its repeats.
 *
 * Writes bench/results/pool-sweep.json exactly as
 * `{"grid": [{"threads", "rate", "achieved_rps", "p50_ms", "p99_ms", "errors", "degraded",
 * "cpu_ms_per_call"}], "recommendation": {"threads", "max_rate_p99_20ms"}}`, the raw runs with the
 * machine and settings in bench/results/pool-sweep-runs.json, and bench/results/pool-sweep.svg (p99
 * against the offered rate, log axis, one line per thread count). Prints the recommendation: the thread
 * count that keeps p99 ≤ 20 ms with no error up to the highest rate (ties: fewer threads).
 */

import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { stringFlags } from '../../src/tools/cli/command-args.js';
import { median } from '../../src/tools/client/stats.js';
import * as benchRun from '../lib/bench-run.js';
import { benchLoadData } from '../lib/load-data.js';
import { measureStep, type StepRow } from '../lib/load-step.js';
import { writeResultFile } from '../lib/paths.js';
import { writeLineChart } from '../lib/plot.js';
import { explainFailure, startServiceProcess } from '../lib/service-process.js';

/** The p99 target the recommendation is made against, ms. */
export const P99_TARGET_MS = 20;

const USAGE = `usage: npm run bench:internal -- pool-sweep [options]
  --rates <r1,r2,…>       offered rates, rps, up to saturation (default 50,100,200,400)
  --threads <n1,n2,…>     pool sizes, one fresh service each (default 1,2,3,4)
  --repeats <n>           runs per (threads, rate) cell (default 3)
  --seconds <s>           measured seconds per run (default 10)
  --warmup-seconds <s>    unrecorded load at the same rate before each run (default 3)
  --out <dir>             where the results go (default bench/results)`;

interface Options {
  rates: number[];
  threads: number[];
  repeats: number;
  seconds: number;
  warmupSeconds: number;
}

/** One cell of the grid (the shape, nothing more). */
export interface GridCell {
  threads: number;
  /** Offered rate, rps. */
  rate: number;
  /** Median over the repeats, answers/s. */
  achieved_rps: number;
  /** Median over the repeats, ms (client side, from the intended send time). */
  p50_ms: number;
  p99_ms: number;
  /** Total over the repeats: non-OK statuses plus calls left unanswered. */
  errors: number;
  /** Total over the repeats: OK answers at L1 or L2. */
  degraded: number;
  /** Median over the repeats of the service's CPU per answered call (all its threads), ms. */
  cpu_ms_per_call: number | null;
}

/** What to run. */
export interface Recommendation {
  threads: number;
  /** Highest offered rate with p99 ≤ 20 ms and no error, rps; null when no rate met it. */
  max_rate_p99_20ms: number | null;
}

/** A measured run: its pool size and the step row. */
export type Run = StepRow & { threads: number; repeat: number };

const round2 = (x: number) => Math.round(x * 100) / 100;

/** Folds the runs into one {@link GridCell} per (threads, rate), in threads then rate order. */
export function gridOf(runs: readonly Run[]): GridCell[] {
  const cells = new Map<string, Run[]>();
  for (const r of runs) {
    const key = `${r.threads}/${r.rate}`;
    cells.set(key, [...(cells.get(key) ?? []), r]);
  }
  return [...cells.values()]
    .map((rs): GridCell => {
      const cpu = rs.flatMap((r) =>
        r.cpu_ms_per_call ? [r.cpu_ms_per_call.server_main + r.cpu_ms_per_call.server_other] : [],
      );
      return {
        threads: rs[0]!.threads,
        rate: rs[0]!.rate,
        achieved_rps: round2(median(rs.map((r) => r.achieved_rps))),
        p50_ms: round2(median(rs.map((r) => r.p50_ms))),
        p99_ms: round2(median(rs.map((r) => r.p99_ms))),
        errors: rs.reduce((s, r) => s + r.errors, 0),
        degraded: rs.reduce((s, r) => s + r.degraded, 0),
        cpu_ms_per_call: cpu.length > 0 ? round2(median(cpu)) : null,
      };
    })
    .sort((a, b) => a.threads - b.threads || a.rate - b.rate);
}

/**
 * The thread count whose highest clean rate (p99 ≤ {@link P99_TARGET_MS} and no error, with every lower
 * rate clean too) is the highest; ties go to fewer threads. When no cell is clean: the thread count with
 * the lowest p99 at the lowest rate, and `max_rate_p99_20ms: null`.
 * @throws Error on an empty grid.
 */
export function recommend(grid: readonly GridCell[]): Recommendation {
  if (grid.length === 0) throw new Error('empty grid');
  const threads = [...new Set(grid.map((c) => c.threads))].sort((a, b) => a - b);
  let best: Recommendation | null = null;
  for (const t of threads) {
    let max: number | null = null;
    for (const c of grid.filter((g) => g.threads === t).sort((a, b) => a.rate - b.rate)) {
      if (c.p99_ms > P99_TARGET_MS || c.errors > 0) break;
      max = c.rate;
    }
    if (max !== null && (best === null || best.max_rate_p99_20ms === null || max > best.max_rate_p99_20ms))
      best = { threads: t, max_rate_p99_20ms: max };
  }
  if (best) return best;
  const lowest = Math.min(...grid.map((c) => c.rate));
  const atLowest = grid
    .filter((c) => c.rate === lowest)
    .sort((a, b) => a.p99_ms - b.p99_ms || a.threads - b.threads);
  return { threads: atLowest[0]!.threads, max_rate_p99_20ms: null };
}

const FLAGS = stringFlags('rates', 'threads', 'repeats', 'seconds', 'warmup-seconds');

function parseOptions(values: benchRun.BenchFlagValues<typeof FLAGS>): Options {
  return {
    rates: benchRun.parseList('--rates', values.rates ?? '50,100,200,400'),
    threads: benchRun.parseList('--threads', values.threads ?? '1,2,3,4'),
    repeats: benchRun.parseInteger('--repeats', values.repeats ?? '3'),
    seconds: benchRun.parseNumber('--seconds', values.seconds ?? '10'),
    warmupSeconds: benchRun.parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '3', true),
  };
}

async function main(argv: string[]): Promise<number> {
  const opts = benchRun.serviceLoadBenchOptions(argv, USAGE, FLAGS, parseOptions);
  if (typeof opts === 'number') return opts;
  const { db, data } = await benchLoadData('ibex-bench-pool-sweep-', opts.locomo);
  console.error(
    `grid: threads ${opts.threads.join(',')} × rates ${opts.rates.join(',')} rps × ${opts.repeats} repeats, ` +
      `${opts.warmupSeconds} + ${opts.seconds} s each`,
  );

  const runs: Run[] = [];
  for (const threads of opts.threads) {
    const env = {
      ...opts.serviceEnv,
      IBEX_CONTEXT_POOL_MIN_THREADS: String(threads),
      IBEX_CONTEXT_POOL_MAX_THREADS: String(threads),
    };
    const service = await startServiceProcess({
      db,
      env,
      nodeArgs: opts.nodeArgs,
      plainNode: opts.plainNode,
      logFile: opts.serviceLog === undefined ? undefined : `${opts.serviceLog}.threads-${threads}`,
    });
    try {
      // Repeats interleave the rates, so a burst of noise on the shared machine hits one run, not a cell.
      for (let repeat = 1; repeat <= opts.repeats; repeat++) {
        for (const rate of opts.rates) {
          const row = await measureStep(service, {
            rate,
            seconds: opts.seconds,
            rampSeconds: opts.warmupSeconds,
            connections: opts.connections,
            timeoutMs: opts.timeoutMs,
            source: data.source,
          });
          runs.push({ threads, repeat, ...row });
          console.error(
            `${threads} thr, ${rate} rps, run ${repeat}: achieved ${row.achieved_rps}, p50 ${row.p50_ms} ms, ` +
              `p99 ${row.p99_ms} ms, errors ${row.errors}, degraded ${row.degraded}` +
              `${row.driver.limited ? ' [driver-limited]' : ''}`,
          );
        }
      }
    } catch (err) {
      throw explainFailure(service, err);
    } finally {
      await service.stop();
    }
  }

  const grid = gridOf(runs);
  const recommendation = recommend(grid);
  mkdirSync(opts.out, { recursive: true });
  const jsonFile = path.join(opts.out, 'pool-sweep.json');
  writeResultFile(jsonFile, { grid, recommendation });
  const runsFile = path.join(opts.out, 'pool-sweep-runs.json');
  const machine = benchRun.machineInfo();
  writeResultFile(runsFile, {
    generated_at: new Date().toISOString(),
    node: process.version,
    machine,
    config: {
      rates: opts.rates,
      threads: opts.threads,
      repeats: opts.repeats,
      seconds: opts.seconds,
      warmup_seconds: opts.warmupSeconds,
      connections: opts.connections,
      timeout_ms: opts.timeoutMs,
      service_env: opts.serviceEnv,
      driver: 'in the bench process (one thread), service in a child process',
    },
    data: { kind: data.kind, agents: data.agents, memories: data.memories, requests: data.requests },
    runs,
  });

  const svgFile = path.join(opts.out, 'pool-sweep.svg');
  await writeLineChart(svgFile, {
    title: 'p99 against offered rate, one line per pool size (open loop)',
    subtitle:
      `${data.kind.split('(')[0]} data, ${machine.cpus} CPUs shared by server and driver, ` +
      `median of ${opts.repeats} × ${opts.seconds} s runs; dashed: the ${P99_TARGET_MS} ms target`,
    xTitle: 'offered rate, req/s (log scale)',
    yTitle: 'p99 ms (log scale)',
    xLog: true,
    yLog: true,
    xTicksAtData: true,
    series: [
      ...opts.threads.map((t) => ({
        name: `${t} thread${t === 1 ? '' : 's'}`,
        points: grid.filter((c) => c.threads === t).map((c) => ({ x: c.rate, y: c.p99_ms })),
      })),
      {
        name: `${P99_TARGET_MS} ms`,
        dashed: true,
        points: [
          { x: Math.min(...opts.rates), y: P99_TARGET_MS },
          { x: Math.max(...opts.rates), y: P99_TARGET_MS },
        ],
      },
    ],
  });

  console.table(grid.map((c) => ({ ...c, cpu_ms_per_call: c.cpu_ms_per_call ?? '-' })));
  const limited = runs.filter((r) => r.driver.limited).length;
  if (limited > 0)
    console.log(`note: ${limited} run(s) were driver-limited; their latencies include driver time`);
  console.log(
    recommendation.max_rate_p99_20ms === null
      ? `recommendation: ${recommendation.threads} thread(s) (lowest p99 at ${Math.min(...opts.rates)} rps); ` +
          `no rate kept p99 ≤ ${P99_TARGET_MS} ms with no error on this machine`
      : `recommendation: ${recommendation.threads} thread(s): p99 ≤ ${P99_TARGET_MS} ms with no error up to ` +
          `${recommendation.max_rate_p99_20ms} rps`,
  );
  console.log(
    `wrote ${path.relative(process.cwd(), jsonFile)}, ${path.relative(process.cwd(), runsFile)} and ` +
      `${path.relative(process.cwd(), svgFile)}`,
  );
  return 0;
}

// Run only as a script, so tests can import gridOf/recommend.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  benchRun.runBenchMain(() => main(process.argv.slice(2)));
}
