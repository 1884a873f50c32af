/**
 * `npm run bench:tracing -- [--rate 300] [--rounds 4] [--step-seconds 10] [--warmup-seconds 20]`: what
 * tracing costs. Three services of this build over one embedded store — tracing off, on at 1 % sampling
 * (`parentbased_traceidratio`, 0.01) and on at 100 % (`parentbased_always_on`) — exporting over OTLP
 * HTTP/protobuf to a sink collector in this process (reads and discards each batch, answers 200), driven
 * by bench:load's open-loop driver and step measure. The services take turns, one step each per round (the
 * order reversed every other round) so that a shared machine's drift reaches all three alike, as in
 * bench:ab. Per round and mode: server CPU ms per call (main thread, pool, store, other, total, from
 * /proc), p50/p99 and errors; then medians and each traced mode's median difference from off.
 * Writes bench/results/tracing.json. Figures, not gates.
 */

import { mkdirSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { booleanFlags, stringFlags } from '../src/tools/cli/command-args.js';
import { abConfig, runAbRounds } from './internal/lib/ab-rounds.js';
import { summariseAb } from './internal/lib/ab-summary.js';
import * as benchRun from './lib/bench-run.js';
import { benchLoadData } from './lib/load-data.js';
import { writeResultFile } from './lib/paths.js';
import { explainFailure, type ServiceProcess, startServiceProcess } from './lib/service-process.js';
import { contextManagerFigures, type TracingMicroRow, tracingMicroFigures } from './lib/tracing-micro.js';

const USAGE = `usage: npm run bench:tracing -- [options]
  --rate <req/s>          offered rate of every step (default 300)
  --rounds <n>            rounds; each mode runs one step per round (default 4)
  --step-seconds <s>      measured seconds per step (default 10)
  --warmup-seconds <s>    unrecorded warm-up of each service before the rounds (default 20)
  --constrained <share>   share of calls with a constraining available_tokens (default 0.5)
  --micro-seconds <s>     time of the in-process figure of one call's tracing work per mode (default 3)
  --micro-only            only that figure, no services
  --out <dir>             where tracing.json goes (default bench/results)`;

const FLAGS = {
  ...stringFlags('rate', 'rounds', 'step-seconds', 'warmup-seconds', 'constrained', 'micro-seconds'),
  ...booleanFlags('micro-only'),
} as const;

interface Options {
  rate: number;
  rounds: number;
  stepSeconds: number;
  warmupSeconds: number;
  constrained: number;
  microSeconds: number;
  microOnly: boolean;
}

function parseOptions(values: benchRun.BenchFlagValues<typeof FLAGS>): Options {
  const constrained = benchRun.parseNumber('--constrained', values.constrained ?? '0.5', true);
  if (constrained > 1) throw new Error(`--constrained must be in 0..1, got '${values.constrained}'`);
  return {
    rate: benchRun.parseNumber('--rate', values.rate ?? '300'),
    rounds: benchRun.parseInteger('--rounds', values.rounds ?? '4'),
    stepSeconds: benchRun.parseNumber('--step-seconds', values['step-seconds'] ?? '10'),
    warmupSeconds: benchRun.parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '20', true),
    constrained,
    microSeconds: benchRun.parseNumber('--micro-seconds', values['micro-seconds'] ?? '3'),
    microOnly: values['micro-only'] === true,
  };
}

/** A collector that takes every export and keeps nothing: the bench measures the service, not a backend. */
async function startSink(): Promise<{
  url: string;
  requests: () => number;
  bytes: () => number;
  close(): Promise<void>;
}> {
  let requests = 0;
  let bytes = 0;
  const server = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => {
      bytes += c.length;
    });
    req.on('end', () => {
      requests++;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    requests: () => requests,
    bytes: () => bytes,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function main(argv: string[]): Promise<number> {
  const opts = benchRun.serviceLoadBenchOptions(argv, USAGE, FLAGS, parseOptions);
  if (typeof opts === 'number') return opts;
  console.error(`one call's tracing work, in-process: ${opts.microSeconds} s per mode`);
  const micro: TracingMicroRow[] = await tracingMicroFigures(opts.microSeconds * 1000);
  console.table(Object.fromEntries(micro.map((r) => [r.mode, r])));
  const contextManager = await contextManagerFigures(opts.microSeconds * 1000);
  console.log(
    `an async call of 40 awaits: ${contextManager.plain_us} µs plain, ${contextManager.in_store_us} µs inside AsyncLocalStorage.run`,
  );
  if (opts.microOnly) {
    mkdirSync(opts.out, { recursive: true });
    const file = path.join(opts.out, 'tracing-micro.json');
    writeResultFile(file, {
      generated_at: new Date().toISOString(),
      node: process.version,
      machine: benchRun.machineInfo(),
      micro,
      context_manager: contextManager,
    });
    console.log(`wrote ${path.relative(process.cwd(), file)}`);
    return 0;
  }
  const { db, data } = await benchLoadData('ibex-bench-tracing-', opts.locomo);
  const sink = await startSink();
  const traced = (sampler: string, arg: string) => ({
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: sink.url,
    OTEL_TRACES_SAMPLER: sampler,
    OTEL_TRACES_SAMPLER_ARG: arg,
    // The default 5 s delay: at 300 req/s × 12 spans a batch of 512 leaves about every 0.15 s anyway.
  });
  const modes: { name: string; env: Record<string, string> }[] = [
    { name: 'off', env: { OTEL_TRACES_EXPORTER: 'none' } },
    { name: 'sampled 1 %', env: traced('parentbased_traceidratio', '0.01') },
    { name: 'sampled 100 %', env: traced('parentbased_always_on', '1') },
  ];
  const services: ServiceProcess[] = [];
  try {
    for (const mode of modes) {
      services.push(
        await startServiceProcess({
          db,
          env: { ...opts.serviceEnv, ...mode.env },
          nodeArgs: opts.nodeArgs,
          plainNode: opts.plainNode,
        }),
      );
      console.error(`${mode.name}: service pid ${services.at(-1)!.pid} on ${services.at(-1)!.grpcAddr}`);
    }
    const steps = await runAbRounds(services, data.source, opts, (k) => modes[k]!.name);
    const summaries = summariseAb(modes.length, steps);
    const off = summaries[0]!.median_ms_per_call.total;
    const summary = summaries.map((s) => {
      return {
        mode: modes[s.build]!.name,
        ...s,
        total_vs_off_percent:
          s.build === 0 || !s.vs_first ? 0 : Math.round((1000 * s.vs_first.total.median_diff_ms) / off) / 10,
      };
    });
    console.table(
      Object.fromEntries(
        summary.map((s) => [
          s.mode,
          {
            'server CPU ms/call (median)': s.median_ms_per_call.total,
            'main thread ms/call': s.median_ms_per_call.main,
            'vs off, ms (median of rounds)': s.vs_first?.total.median_diff_ms ?? 0,
            'vs off, %': s.total_vs_off_percent,
            'p99 ms (median)': s.p99_ms_median,
          },
        ]),
      ),
    );
    console.log(`sink collector: ${sink.requests()} exports, ${(sink.bytes() / 1e6).toFixed(1)} MB`);
    mkdirSync(opts.out, { recursive: true });
    const result = {
      generated_at: new Date().toISOString(),
      node: process.version,
      machine: benchRun.machineInfo(),
      config: { ...abConfig(opts), modes },
      data: { kind: data.kind, agents: data.agents, memories: data.memories, requests: data.requests },
      sink: { exports: sink.requests(), bytes: sink.bytes() },
      micro,
      context_manager: contextManager,
      summary,
      steps,
    };
    const file = path.join(opts.out, 'tracing.json');
    writeResultFile(file, result);
    console.log(`wrote ${path.relative(process.cwd(), file)}`);
  } catch (err) {
    throw services.length > 0 ? explainFailure(services[0]!, err) : err;
  } finally {
    await Promise.all(services.map((s) => s.stop()));
    await sink.close();
  }
  return 0;
}

benchRun.runBenchMain(() => main(process.argv.slice(2)));
