/**
 * What the load-held benches (`bench:overload`, `bench:soak`) share: the service as a child
 * process (bench/lib/service-process.ts) on generated data (bench-data.ts) at its saturation rate
 * (ramp.ts), its RSS read from /proc, and the flags and table output. Per-call outcomes are in
 * outcomes.ts.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { numberFlag } from '../../src/tools/client/cli-options.js';
import { type BenchData, type BenchDataOptions, seedStore } from './bench-data.js';
import { machineInfo, tempDir } from './bench-run.js';
import { type findSaturation, resolveSaturation } from './ramp.js';
import { type ServiceProcess, type ServiceProcessOptions, startServiceProcess } from './service-process.js';

/**
 * Seeds a store in `dir` and starts `serve` on it with production timings unless `env` says otherwise;
 * `how.plainNode` starts node without the service flags, `how.nodeArgs` adds node/V8 flags (A/B runs).
 */
export async function startBenchService(
  dir: string,
  env: Record<string, string> = {},
  data: BenchDataOptions = {},
  how: Pick<ServiceProcessOptions, 'plainNode' | 'nodeArgs'> = {},
): Promise<{ service: ServiceProcess; data: BenchData }> {
  const db = path.join(dir, 'bench.db');
  const seeded = seedStore(db, data);
  const service = await startServiceProcess({ db, env, ...how });
  return { service, data: seeded };
}

/** Request deadline the overload and soak benches run the service and the client with, ms. */
export const BENCH_DEADLINE_MS = 45;
/** Retrieval wall (IBEX_CONTEXT_DEADLINE_MS) of the overload and soak benches' service, ms. */
export const BENCH_WALL_MS = 40;

/** What {@link startSaturatedBench} resolves with. */
export interface SaturatedBench {
  service: ServiceProcess;
  data: BenchData;
  /** Offered rate the service saturates at, req/s (`--rate`, or found by the ramp). */
  saturationRate: number;
  /** The ramp that found it; null when `--rate` gave it. */
  saturation: Awaited<ReturnType<typeof findSaturation>> | null;
}

/**
 * The common start of the overload and soak benches: prints the machine line, starts the service with the
 * production deadlines (45 ms request deadline, 40 ms wall) on generated data, and resolves the saturation
 * rate (`--rate` or a ramp), over a store in a temp dir (`ibex-<name>-…`, removed on exit). Stops the
 * service again if the ramp fails.
 */
export async function startSaturatedBench(
  name: string,
  opts: { rate?: number; connections: number },
): Promise<SaturatedBench> {
  console.log(
    `bench:${name} — ${os.availableParallelism()} CPUs, load average ${os.loadavg()[0]!.toFixed(2)}`,
  );
  const { service, data } = await startBenchService(tempDir(`ibex-${name}-`), {
    IBEX_CONTEXT_TIMEOUT: String(BENCH_DEADLINE_MS),
    IBEX_CONTEXT_DEADLINE_MS: String(BENCH_WALL_MS),
  });
  try {
    console.log(`service pid ${service.pid} on ${service.grpcAddr}; data ${data.describe}`);
    const { rate, saturation } = await resolveSaturation(service.grpcAddr, data.source, {
      rate: opts.rate,
      connections: opts.connections,
      deadlineMs: BENCH_DEADLINE_MS,
    });
    return { service, data, saturationRate: rate, saturation };
  } catch (err) {
    await service.stop();
    throw err;
  }
}

/**
 * The head of an overload or soak result: bench name, date, machine, the deadlines the service and client
 * ran with, the bench's own `settings` (then the data described), and how the saturation rate was found.
 */
export function saturatedResultHead(
  name: string,
  bench: Pick<SaturatedBench, 'data' | 'saturationRate' | 'saturation'>,
  settings: Record<string, unknown>,
) {
  return {
    bench: name,
    date: new Date().toISOString(),
    machine: machineInfo(),
    settings: {
      request_deadline_ms: BENCH_DEADLINE_MS,
      wall_ms: BENCH_WALL_MS,
      client_deadline_ms: BENCH_DEADLINE_MS,
      ...settings,
      data: bench.data.describe,
    },
    saturation: {
      rate: bench.saturationRate,
      from: bench.saturation ? 'ramp' : '--rate',
      ramp: bench.saturation,
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Process memory

/** VmRSS of `pid` in bytes (/proc/<pid>/status), or null where /proc is missing or the process is gone. */
export function rssBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** RSS of a process sampled every `intervalMs`: start, peak, end, MB. */
export function sampleRss(pid: number, intervalMs = 250) {
  const first = rssBytes(pid) ?? 0;
  let peak = first;
  let last = first;
  const timer = setInterval(() => {
    const v = rssBytes(pid);
    if (v === null) return;
    last = v;
    if (v > peak) peak = v;
  }, intervalMs);
  return {
    /** Stops sampling and reads the end value. */
    stop(): { start_mb: number; peak_mb: number; end_mb: number } {
      clearInterval(timer);
      const end = rssBytes(pid) ?? last;
      const mb = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
      return { start_mb: mb(first), peak_mb: mb(Math.max(peak, end)), end_mb: mb(end) };
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Flags and output

/**
 * `--name value` flags of a bench, positive numbers only: split by `parseArgs`, each read by the commands'
 * {@link numberFlag}. @throws Error for an unknown flag or a value that is not a positive number.
 */
export function numberFlags(argv: readonly string[], known: readonly string[]): Record<string, number> {
  const { values } = parseArgs({
    args: [...argv],
    strict: true,
    options: Object.fromEntries(known.map((k) => [k, { type: 'string' as const }])),
  });
  const out: Record<string, number> = {};
  for (const [name, raw] of Object.entries(values)) {
    out[name] = numberFlag(name, raw as string, 0, { positive: true });
  }
  return out;
}

/** Prints rows as an aligned text table. */
export function printTable(rows: readonly (readonly [string, string | number])[]): void {
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) console.log(`  ${k.padEnd(width)}  ${v}`);
}
