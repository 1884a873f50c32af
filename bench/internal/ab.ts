/**
 * `npm run bench:internal -- ab --builds <checkout>,<checkout>[,…] [--locomo <dir>] [--rate 600] [--rounds 8]`: CPU
 * per call of two or more builds of the service on the same machine at the same time.
 *
 * Separate `bench:load` runs minutes apart cannot show a 5 % change on a shared two-core machine: its speed
 * drifts by ±10 % within a minute. Here every build runs as its own service over one embedded store, each
 * is warmed up, and then the builds take turns, one `--step-seconds` step each per round (the order reversed
 * every other round), so that drift reaches all of them alike. Per round and build: CPU ms per call of the
 * server's threads from `/proc` (main, pool, store, other, total), p99 and errors; then the median over the
 * rounds, and for every build after the first the median of its per-round differences from the first build
 * and in how many rounds it was lower. Each `<checkout>` is a project checkout with `dist/` built (e.g. a
 * `git worktree` of another commit with `npm run build`); the driver and the data are this checkout's.
 * Writes ab.json into `--out` (default bench/results). Figures, not gates.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { stringFlags } from '../../src/tools/cli/command-args.js';
import * as benchRun from '../lib/bench-run.js';
import { benchLoadData } from '../lib/load-data.js';
import { writeResultFile } from '../lib/paths.js';
import { explainFailure, type ServiceProcess, startServiceProcess } from '../lib/service-process.js';
import { abConfig, runAbRounds } from './lib/ab-rounds.js';
import { summariseAb } from './lib/ab-summary.js';

const USAGE = `usage: npm run bench:internal -- ab --builds <checkout>,<checkout>[,…] [options]
  --builds <dirs>         project checkouts with dist/ built, comma-separated (the first is the reference)
  --rate <req/s>          offered rate of every step (default 600)
  --rounds <n>            rounds; each build runs one step per round (default 8)
  --step-seconds <s>      measured seconds per step (default 10)
  --warmup-seconds <s>    unrecorded warm-up of each build before the rounds (default 30)
  --constrained <share>   share of calls with a constraining available_tokens (default 0.5)
  --out <dir>             where ab.json goes (default bench/results)`;

const FLAGS = stringFlags('builds', 'rate', 'rounds', 'step-seconds', 'warmup-seconds', 'constrained');

/** A checkout's service entry point. */
const ENTRY = 'dist/src/tools/cli/main.js';
const entryOf = (build: string) => path.join(build, ENTRY);

interface Options {
  builds: string[];
  rate: number;
  rounds: number;
  stepSeconds: number;
  warmupSeconds: number;
  constrained: number;
}

function parseOptions(values: benchRun.BenchFlagValues<typeof FLAGS>): Options {
  const builds = (values.builds ?? '').split(',').filter((b) => b !== '');
  if (builds.length < 2) throw new Error('--builds: give at least two checkouts, comma-separated');
  for (const b of builds) {
    // Before any data is generated or service started.
    if (!existsSync(entryOf(path.resolve(b))))
      throw new Error(`--builds: ${b} has no ${ENTRY} (npm run build there)`);
  }
  const constrained = benchRun.parseNumber('--constrained', values.constrained ?? '0.5', true);
  if (constrained > 1) throw new Error(`--constrained must be in 0..1, got '${values.constrained}'`);
  return {
    builds: builds.map((b) => path.resolve(b)),
    rate: benchRun.parseNumber('--rate', values.rate ?? '600'),
    rounds: benchRun.parseInteger('--rounds', values.rounds ?? '8'),
    stepSeconds: benchRun.parseNumber('--step-seconds', values['step-seconds'] ?? '10'),
    warmupSeconds: benchRun.parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '30', true),
    constrained,
  };
}

/** The commit a checkout is at, or null when it is not a git checkout. */
function commitOf(dir: string): string | null {
  try {
    return execFileSync('git', ['-C', dir, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
}

async function main(argv: string[]): Promise<number> {
  const opts = benchRun.serviceLoadBenchOptions(argv, USAGE, FLAGS, parseOptions);
  if (typeof opts === 'number') return opts;
  const { db, data } = await benchLoadData('ibex-bench-ab-', opts.locomo);
  const services: ServiceProcess[] = [];
  try {
    for (const build of opts.builds) {
      services.push(
        await startServiceProcess({
          db,
          env: opts.serviceEnv,
          nodeArgs: opts.nodeArgs,
          plainNode: opts.plainNode,
          entry: entryOf(build),
        }),
      );
      console.error(`${build}: service pid ${services.at(-1)!.pid} on ${services.at(-1)!.grpcAddr}`);
    }
    const steps = await runAbRounds(services, data.source, opts, (k) => `build ${k} (${opts.builds[k]})`);
    const summary = summariseAb(opts.builds.length, steps);
    for (const s of summary) console.log(JSON.stringify({ dir: opts.builds[s.build], ...s }));
    mkdirSync(opts.out, { recursive: true });
    const result = {
      generated_at: new Date().toISOString(),
      node: process.version,
      machine: benchRun.machineInfo(),
      config: abConfig(opts),
      builds: opts.builds.map((dir) => ({ dir, commit: commitOf(dir) })),
      data: { kind: data.kind, agents: data.agents, memories: data.memories, requests: data.requests },
      summary,
      steps,
    };
    writeResultFile(path.join(opts.out, 'ab.json'), result);
  } catch (err) {
    throw services.length > 0 ? explainFailure(services[0]!, err) : err;
  } finally {
    await Promise.all(services.map((s) => s.stop()));
  }
  return 0;
}

benchRun.runBenchMain(() => main(process.argv.slice(2)));
