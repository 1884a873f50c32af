/**
 * `npm run bench:load [-- --locomo <dir>] [--steps 500,1000,2000,3000,4000] [--step-seconds 10]`:
 * latency against offered rate, open loop.
 *
 * Starts the service as a child process on free loopback ports over a temporary embedded store (LoCoMo
 * ingested with `--locomo`, else a generated set of the same shape and size), warms it up, then runs one
 * open-loop step per rate. Latency is measured from each request's intended send time (coordinated
 * omission corrected). Per step it records what the client saw and, from `/metrics` and `/proc` around
 * the step, where the server spent the time: pool wait and run, retrieval branches, event-loop delay,
 * CPU of the server's threads, the driver's own CPU and schedule lag, and the rest of the machine.
 *
 * The driver sends pre-encoded messages over node:http2 (`--transport grpc-js` to compare); every
 * step records CPU per call per thread from `/proc/<pid>/task/<tid>/stat` (server main thread, pool workers
 * `ibex-pool`, store readers `ibex-store`, the rest; and the driver), after a 30 s warm-up by default (a
 * shorter one leaves JIT in the figures); half the calls carry an `available_tokens` (the budget mix,
 * `--constrained`) and every step reports the constrained share and the share where the packer chose.
 * `--h2load` drives the first rate once more with nghttp2's h2load for a cross-check of the driver.
 *
 * Writes bench/results/load.json and bench/results/load.svg (p50/p99/p99.9 against rate, log y), prints
 * a table, the highest rate with p99 ≤ 20 ms and no error, and where the time goes at that rate.
 * Figures, not gates: on a small shared machine the driver competes with the server for the cores; the
 * `drv cpu`, `drv lag` and `other` columns say how much.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { SERVICE_NODE_FLAGS } from '../src/config/node-flags.js';
import { booleanFlags, stringFlags } from '../src/tools/cli/command-args.js';
import { budgetMix, mixedSource, probeCandidateTokens } from '../src/tools/client/budget-mix.js';
import { runLoad } from '../src/tools/client/load-driver.js';
import { type TransportName, transportFlag } from '../src/tools/client/load-transport.js';
import * as benchRun from './lib/bench-run.js';
import { type H2loadResult, hasH2load, runH2load } from './lib/h2load.js';
import { benchLoadData } from './lib/load-data.js';
import {
  isClean,
  measureStep,
  type StepRow,
  tableCells,
  tailBesideMarkCompacts,
  waitForIdle,
  whereTheTimeGoes,
} from './lib/load-step.js';
import { writeResultFile } from './lib/paths.js';
import { allowedCpus, type OverloadPhase, pinAll, runBareFloor, runOverload } from './lib/pinned.js';
import { writeLoadCharts } from './lib/plot.js';
import { explainFailure, startServiceProcess } from './lib/service-process.js';

const USAGE = `usage: npm run bench:load -- [options]
  --steps <r1,r2,…>       offered rates, req/s (default 500,1000,2000,3000,4000)
  --step-seconds <s>      measured seconds per step (default 10)
  --ramp-seconds <s>      unrecorded seconds at each step's rate before it is measured (default 1)
  --warmup-seconds <s>    unrecorded warm-up at the first rate after start-up (default 30: a shorter one
                          leaves JIT time in the CPU figures; shorten it only on a shared machine)
  --constrained <share>   share of calls with an available_tokens that fits 30–80 % of the candidates'
                          tokens (the budget mix; default 0.5)
  --seed <n>              seed of the budget mix (default 1)
  --transport <h2|grpc-js>  driver transport (default h2)
  --h2load                after the steps, drive the first rate with h2load (nghttp2-client) too and report both
  --threads <n>           pool threads of the service (default: the service's own default)
  --cpu-prof <dir>        write V8 CPU profiles of the service (all its threads) into <dir>
  --p99-target <ms>       latency target of the summary line (default 20)
  --pinned                per-core figures: the service and all its threads on the second allowed CPU, this
                          driver on the first (taskset, both printed), one pool thread unless --threads; the
                          bare grpc-js floor driven the same way in the same run; writes load-pinned.json
  --floor-steps <r1,…>    rates of the bare grpc-js floor (default 1000,2000,3000; with --pinned or --floor)
  --floor                 run the bare grpc-js floor without --pinned too
  --single-call           after the steps, one call at a time (closed loop, one connection) for a step's
                          seconds: the latency of a call that never waits for another, the p99 no rate can
                          beat (default with --pinned)
  --overload-seconds <s>  after the steps, offer --overload-factor × the saturation rate (the step with the
                          most L0 answers/s) for this long, then the clean rate in 0.25 s slices for 5 s:
                          errors, L0 and shed shares, p99, seconds back to L0 (default 20 with --pinned, else 0)
  --overload-factor <x>   multiple of the saturation rate offered in the overload phase (default 1.5)
  --out <dir>             where load.json and load.svg go (default bench/results)`;

interface Options {
  steps: number[];
  stepSeconds: number;
  rampSeconds: number;
  warmupSeconds: number;
  constrained: number;
  seed: number;
  transport: TransportName;
  h2load: boolean;
  threads: number | undefined;
  cpuProf: string | undefined;
  p99TargetMs: number;
  pinned: boolean;
  floor: boolean;
  floorSteps: number[];
  singleCall: boolean;
  overloadSeconds: number;
  overloadFactor: number;
}

const FLAGS = {
  ...stringFlags('steps', 'step-seconds', 'ramp-seconds', 'warmup-seconds', 'constrained', 'seed'),
  ...stringFlags('transport', 'threads', 'cpu-prof', 'p99-target'),
  ...stringFlags('floor-steps', 'overload-seconds', 'overload-factor'),
  ...booleanFlags('h2load', 'pinned', 'floor', 'single-call'),
} as const;

function parseOptions(values: benchRun.BenchFlagValues<typeof FLAGS>): Options {
  return {
    steps: benchRun.parseList('--steps', values.steps ?? '500,1000,2000,3000,4000'),
    stepSeconds: benchRun.parseNumber('--step-seconds', values['step-seconds'] ?? '10'),
    rampSeconds: benchRun.parseNumber('--ramp-seconds', values['ramp-seconds'] ?? '1', true),
    warmupSeconds: benchRun.parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '30', true),
    constrained: shareOf(values.constrained ?? '0.5'),
    seed: benchRun.parseInteger('--seed', values.seed ?? '1'),
    transport: transportFlag(values.transport ?? 'h2'),
    h2load: values.h2load ?? false,
    threads: values.threads === undefined ? undefined : benchRun.parseInteger('--threads', values.threads),
    cpuProf: values['cpu-prof'] === undefined ? undefined : path.resolve(values['cpu-prof']),
    p99TargetMs: benchRun.parseNumber('--p99-target', values['p99-target'] ?? '20'),
    pinned: values.pinned ?? false,
    floor: values.floor ?? values.pinned ?? false,
    floorSteps: benchRun.parseList('--floor-steps', values['floor-steps'] ?? '1000,2000,3000'),
    singleCall: values['single-call'] ?? values.pinned ?? false,
    overloadSeconds: benchRun.parseNumber(
      '--overload-seconds',
      values['overload-seconds'] ?? (values.pinned ? '20' : '0'),
      true,
    ),
    overloadFactor: benchRun.parseNumber('--overload-factor', values['overload-factor'] ?? '1.5'),
  };
}

function shareOf(v: string): number {
  const n = benchRun.parseNumber('--constrained', v, true);
  if (n > 1) throw new Error(`--constrained must be in 0..1, got '${v}'`);
  return n;
}

async function main(argv: string[]): Promise<number> {
  const opts = benchRun.serviceLoadBenchOptions(argv, USAGE, FLAGS, parseOptions);
  if (typeof opts === 'number') return opts;
  const { db, data } = await benchLoadData('ibex-bench-load-', opts.locomo);
  const serviceEnv: Record<string, string> = { ...opts.serviceEnv };
  const cpus = opts.pinned ? allowedCpus() : [];
  if (opts.pinned && cpus.length < 2) throw new Error('--pinned needs two allowed CPUs (one for the driver)');
  // Pinned after start (taskset -a -p), so the pool is sized here as it would be under the mask.
  const threads = opts.threads ?? (opts.pinned ? 1 : undefined);
  if (threads !== undefined) {
    serviceEnv.IBEX_CONTEXT_POOL_MAX_THREADS = String(threads);
    serviceEnv.IBEX_CONTEXT_POOL_MIN_THREADS = String(threads);
  }
  const service = await startServiceProcess({
    db,
    env: serviceEnv,
    nodeArgs: [...opts.nodeArgs, ...(opts.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProf}`] : [])],
    plainNode: opts.plainNode,
    logFile: opts.serviceLog,
  });
  const rows: StepRow[] = [];
  let h2: H2loadResult | null = null;
  let pinning: { service: string; driver: string } | null = null;
  let floor: Awaited<ReturnType<typeof runBareFloor>> | null = null;
  let overload: OverloadPhase | null = null;
  let single: StepRow | null = null;
  try {
    console.error(`service pid ${service.pid} on ${service.grpcAddr} (admin ${service.adminUrl})`);
    if (opts.pinned) {
      pinning = { service: pinAll(service.pid, cpus[1]!), driver: pinAll(process.pid, cpus[0]!) };
      console.error(
        `pinned: service ${pinning.service}; driver ${pinning.driver} (node ${process.execArgv.join(' ')})`,
      );
    }
    let source = data.source;
    if (opts.constrained > 0) {
      const tokens = await probeCandidateTokens({ addr: service.grpcAddr }, source.requests ?? []);
      source = mixedSource(
        source,
        budgetMix(tokens, { share: opts.constrained, seed: opts.seed }),
        opts.constrained,
      );
      console.error(
        `budget mix: ${opts.constrained} constrained, candidates' tokens probed for ${tokens.size} agents`,
      );
    }
    const common = {
      connections: opts.connections,
      timeoutMs: opts.timeoutMs,
      tailThresholdMs: opts.p99TargetMs,
      source,
      transport: opts.transport,
    };
    if (opts.warmupSeconds > 0) {
      console.error(`warm-up: ${opts.warmupSeconds} s at ${opts.steps[0]} rps`);
      await runLoad({
        addr: service.grpcAddr,
        rate: opts.steps[0]!,
        durationS: opts.warmupSeconds,
        ...common,
      });
    }
    for (const rate of opts.steps) {
      const row = await measureStep(service, {
        rate,
        seconds: opts.stepSeconds,
        rampSeconds: opts.rampSeconds,
        ...common,
      });
      rows.push(row);
      console.error(
        `${rate} rps: achieved ${row.achieved_rps}, p50 ${row.p50_ms} ms, p99 ${row.p99_ms} ms, ` +
          `p99.9 ${row.p99_9_ms} ms, errors ${row.errors}, degraded ${row.degraded}, after D ${row.server.late_answers}` +
          (row.driver.limited ? ' [driver-limited]' : ''),
      );
      if (row.tail) console.error(`  ${tailBesideMarkCompacts(row)}`);
    }
    if (opts.singleCall) {
      single = await measureStep(service, {
        rate: null,
        seconds: opts.stepSeconds,
        rampSeconds: opts.rampSeconds,
        ...common,
        connections: 1,
      });
      console.error(
        `one call at a time: ${single.achieved_rps} calls/s, p50 ${single.p50_ms} ms, p99 ${single.p99_ms} ms, ` +
          `errors ${single.errors}, degraded ${single.degraded}`,
      );
    }
    const summaryNow = perCoreSummary(rows, opts.stepSeconds, opts.p99TargetMs);
    if (opts.floor) {
      // The clean rate joins the floor's rates: a server's CPU per call falls as its rate rises (fewer
      // wake-ups per call), so the like-for-like ratio compares the two at the same offered rate.
      const floorRates = [
        ...new Set([...opts.floorSteps, ...(summaryNow.clean_rate ? [summaryNow.clean_rate] : [])]),
      ];
      floor = await runBareFloor(
        floorRates.sort((a, b) => a - b),
        opts.stepSeconds,
        common,
        opts.pinned ? cpus[1]! : null,
        opts.singleCall,
      );
    }
    if (opts.overloadSeconds > 0 && summaryNow.saturation_rate !== null) {
      const rate = Math.round(opts.overloadFactor * summaryNow.saturation_rate);
      const recovery = recoveryRate(rows, summaryNow, opts.stepSeconds);
      console.error(`overload: ${rate} rps for ${opts.overloadSeconds} s, then ${recovery} rps`);
      await waitForIdle(service);
      overload = await runOverload(service, rate, opts.overloadSeconds, recovery, 5, common);
      console.error(`overload: ${JSON.stringify({ ...overload, recovery_slices: undefined })}`);
    }
    if (opts.h2load) {
      if (!hasH2load()) throw new Error('--h2load: h2load is not installed (apt-get install nghttp2-client)');
      const req = (data.source.requests ?? [])[0];
      if (req === undefined) throw new Error('--h2load: the request source lists no requests');
      h2 = await runH2load(service.grpcAddr, req, {
        rate: opts.steps[0]!,
        connections: opts.connections,
        durationS: opts.stepSeconds,
        dir: path.dirname(db),
        serverPid: service.pid,
      });
      console.error(`h2load at ${h2.rate} rps: ${JSON.stringify(h2)}`);
    }
  } catch (err) {
    throw explainFailure(service, err);
  } finally {
    await service.stop();
  }

  const clean = rows.filter((r) => isClean(r, opts.p99TargetMs));
  const best = clean.length ? clean.reduce((a, b) => (b.rate > a.rate ? b : a)) : null;
  const criterion = `p99 ≤ ${opts.p99TargetMs} ms and zero errors`;
  const perCore = perCoreSummary(rows, opts.stepSeconds, opts.p99TargetMs);
  // The floor's CPU per call where it answered everything (past that, unanswered calls cost too).
  const cleanFloor = floor?.steps.filter((f) => f.errors === 0) ?? [];
  const bareCpu = cleanFloor.length ? Math.min(...cleanFloor.map((f) => f.cpu_ms_per_call)) : null;
  const bareAtClean = cleanFloor.find((f) => f.rate === perCore.clean_rate)?.cpu_ms_per_call ?? null;
  const ratio = (bare: number | null) =>
    bare && perCore.cpu_ms_per_call_at_clean !== null
      ? Math.round((perCore.cpu_ms_per_call_at_clean / bare) * 100) / 100
      : null;
  const result = {
    generated_at: new Date().toISOString(),
    mode: opts.pinned ? 'pinned' : 'unpinned',
    pinning,
    per_core: {
      ...perCore,
      single_call_p50_ms: single?.p50_ms ?? null,
      single_call_p99_ms: single?.p99_ms ?? null,
      // No offered rate can give a p99 below what calls that never wait for one another get.
      clean_target_below_single_call_floor: single === null ? null : single.p99_ms > opts.p99TargetMs,
      // The same for a bare grpc-js server on the same core: past it, the p99 target is this machine's.
      bare_single_call_p99_ms: floor?.single?.p99_ms ?? null,
      clean_target_below_bare_floor: floor?.single ? floor.single.p99_ms > opts.p99TargetMs : null,
      // The bare server's cheapest call (its highest clean rate) and its call at the service's clean rate.
      bare_cpu_ms_per_call: bareCpu,
      cpu_ratio_to_bare: ratio(bareCpu),
      bare_cpu_ms_per_call_at_clean_rate: bareAtClean,
      cpu_ratio_to_bare_at_clean_rate: ratio(bareAtClean),
    },
    bare_floor: floor?.steps ?? null,
    bare_single_call: floor?.single ?? null,
    single_call: single,
    overload,
    node: process.version,
    // The driver's own V8 flags (DRIVER_NODE_FLAGS: its garbage collection never waits for a helper thread).
    driver_node_flags: process.execArgv,
    machine: benchRun.machineInfo(),
    config: {
      steps: opts.steps,
      step_seconds: opts.stepSeconds,
      ramp_seconds: opts.rampSeconds,
      warmup_seconds: opts.warmupSeconds,
      connections: opts.connections,
      timeout_ms: opts.timeoutMs,
      constrained_share: opts.constrained,
      seed: opts.seed,
      transport: opts.transport,
      pool_threads: rows[0]?.server.pool_threads ?? null,
      p99_target_ms: opts.p99TargetMs,
      service_env: serviceEnv,
      node_args: [...(opts.plainNode ? [] : SERVICE_NODE_FLAGS), ...opts.nodeArgs],
      driver: 'in the bench process (one thread), service in a child process',
    },
    data: { kind: data.kind, agents: data.agents, memories: data.memories, requests: data.requests },
    steps: rows,
    h2load_cross_check: h2,
    best: best
      ? {
          rate: best.rate,
          criterion,
          achieved_rps: best.achieved_rps,
          p99_ms: best.p99_ms,
          degraded: best.degraded,
          driver_limited: best.driver.limited,
          where_the_time_goes: whereTheTimeGoes(best),
        }
      : { rate: null, criterion },
  };
  mkdirSync(opts.out, { recursive: true });
  const jsonFile = path.join(opts.out, opts.pinned ? 'load-pinned.json' : 'load.json');
  writeResultFile(jsonFile, result);
  // The charts are the unpinned run's (bench/results/load.svg); a pinned run writes its JSON only.
  const charts = opts.pinned
    ? null
    : await writeLoadCharts(opts.out, {
        rows,
        stepSeconds: opts.stepSeconds,
        timeoutMs: opts.timeoutMs,
        p99TargetMs: opts.p99TargetMs,
        subtitle:
          `${data.kind.split('(')[0]} data, ${result.machine.cpus} CPUs shared by server and driver, ` +
          `pool ${result.config.pool_threads} threads, ${opts.stepSeconds} s per step`,
      });

  console.table(Object.fromEntries(rows.map((r) => [`${r.rate} rps`, tableCells(r)])));
  console.log(
    'latencies ms (client, from the intended send time); srv = server handler mean; wait/run = pool means; ' +
      'dir/hot/cold = branch means; eld = server event-loop delay; runq = server main thread runnable ' +
      'without a CPU; cpu in cores (server main thread in ' +
      'parentheses); drv lag = driver send lag mean ms; other = cores used by other processes',
  );
  for (const r of rows) {
    if (r.driver.limited)
      console.log(
        `note: at ${r.rate} rps the driver was saturated or late; that step measures the driver too`,
      );
  }
  if (best) {
    console.log(`highest rate with ${criterion}: ${best.rate} rps (${best.degraded} degraded answers)`);
    console.log(`where the time goes at ${best.rate} rps:`);
    for (const line of whereTheTimeGoes(best)) console.log(`  ${line}`);
  } else {
    console.log(`highest rate with ${criterion}: none of the steps met it`);
  }
  console.log(`per core: ${JSON.stringify(result.per_core)}`);
  if (overload) console.log(`overload: ${JSON.stringify({ ...overload, recovery_slices: undefined })}`);
  const rel = (f: string) => path.relative(process.cwd(), f);
  console.log(
    charts
      ? `wrote ${rel(jsonFile)}, ${rel(charts.svgFile)} and ${rel(charts.errorsSvgFile)}`
      : `wrote ${rel(jsonFile)}`,
  );
  return 0;
}

/** At most 1 % of the step's OK answers degraded (`stepSeconds`: the measured window). */
function answeredL0(r: StepRow, stepSeconds: number): boolean {
  return r.degraded <= 0.01 * r.ok_rps * stepSeconds;
}

/**
 * The rate offered after an overload to time the return to all-L0 answers: the clean rate; else the
 * highest step that answered ≥ 99 % L0 with no error (at a rate that degrades more in steady state,
 * a 0.25 s slice without a non-L0 answer is luck, not recovery); else half the saturation rate.
 */
function recoveryRate(
  rows: readonly StepRow[],
  summary: ReturnType<typeof perCoreSummary>,
  stepSeconds: number,
): number {
  if (summary.clean_rate !== null) return summary.clean_rate;
  const l0Clean = rows.filter((r) => r.errors === 0 && answeredL0(r, stepSeconds));
  if (l0Clean.length > 0) return Math.max(...l0Clean.map((r) => r.rate ?? 0));
  return Math.round((summary.saturation_rate ?? 0) / 2);
}

/**
 * The clean rate (0 errors, p99 within the target, ≥ 99 % L0), the saturation rate (the step with the
 * most L0 answers per second) and server CPU per call at the clean rate, ms.
 */
function perCoreSummary(rows: readonly StepRow[], stepSeconds: number, p99TargetMs: number) {
  const l0Rps = (r: StepRow) => r.ok_rps - r.degraded / stepSeconds;
  const clean = rows.filter((r) => isClean(r, p99TargetMs) && answeredL0(r, stepSeconds));
  const best = clean.length ? clean.reduce((a, b) => (b.rate > a.rate ? b : a)) : null;
  const saturation = rows.length ? rows.reduce((a, b) => (l0Rps(b) > l0Rps(a) ? b : a)) : null;
  const cpu = best?.cpu_ms_per_call
    ? best.cpu_ms_per_call.server_main + best.cpu_ms_per_call.server_other
    : null;
  return {
    clean_rate: best?.rate ?? null,
    saturation_rate: saturation?.rate ?? null,
    saturation_l0_rps: saturation ? Math.round(l0Rps(saturation)) : null,
    clean_share_of_saturation:
      best && saturation ? Math.round((best.rate / saturation.rate) * 100) / 100 : null,
    cpu_ms_per_call_at_clean: cpu === null ? null : Math.round(cpu * 1000) / 1000,
  };
}

benchRun.runBenchMain(() => main(process.argv.slice(2)), { driver: true });
