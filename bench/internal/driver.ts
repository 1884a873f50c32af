/**
 * `npm run bench:internal -- driver [-- --steps 200,1000,2000] [--seconds 5] [--warmup-seconds 3] [--repeats 3]
 * [--transports frames,h2,grpc-js]`: what the load
 * driver itself costs per call (target: ≤ 0.15 ms CPU per call at 1,000 req/s), isolated from the
 * service. A child process serves a canned AssembleContext answer (30 memories_used rows, 14.7 KB encoded,
 * as a LoCoMo answer) over plain `node:http2`, so the server side stays cheap and the driver's figures do not
 * depend on whether the real service keeps up; the driver runs in this process, open loop, per transport.
 *
 * Per step: driver CPU per answered call from `/proc/self/task/<tid>/stat` (main thread and the rest:
 * GC/compiler helpers), its event-loop utilization and send lag. With `--repeats N` the whole
 * transport × rate grid runs N times, interleaved (so a busy neighbour hits every transport alike), and
 * the summary gives the median, min and max CPU per call per cell. Writes bench/results/driver.json.
 */

import { fork } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import http2 from 'node:http2';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ASSEMBLE_METHOD } from '../../src/tools/client/context-client.js';
import { grpcFrame } from '../../src/tools/client/grpc-frames.js';
import { runLoad } from '../../src/tools/client/load-driver.js';
import { TRANSPORT_NAMES, type TransportName } from '../../src/tools/client/load-transport.js';
import { syntheticSource } from '../../src/tools/client/request-source.js';
import { median } from '../../src/tools/client/stats.js';
import { LEVEL_HEADER } from '../../src/wire/wire-headers.js';
import { machineInfo, parseList, parseNumber, runBenchMain } from '../lib/bench-run.js';
import { cannedAnswer } from '../lib/canned-rows.js';
import { projectPath, writeResultFile } from '../lib/paths.js';
import { readThreads, threadCpuStep } from '../lib/thread-cpu.js';

/** The canned answer (bench/lib/canned-rows.ts) as one gRPC frame. */
function cannedFrame(): Buffer {
  return grpcFrame(ASSEMBLE_METHOD.responseSerialize(cannedAnswer()) as Buffer);
}

/** Child side: serve the canned answer on 127.0.0.1, port 0, and tell the parent the port. */
function serve(): void {
  const frame = cannedFrame();
  const server = http2.createServer();
  server.on('stream', (stream) => {
    // A call the driver gave up on is reset: nothing to answer, and no error worth dying for.
    stream.on('error', () => {});
    stream.resume();
    stream.on('end', () => {
      if (stream.destroyed || stream.closed) return;
      stream.respond(
        { ':status': 200, 'content-type': 'application/grpc', [LEVEL_HEADER]: 'L0' },
        { waitForTrailers: true },
      );
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(frame);
    });
  });
  server.listen(0, '127.0.0.1', () => process.send?.({ port: (server.address() as { port: number }).port }));
}

/** Repeat × transport × rate, repeats outermost: every transport runs once per repeat. */
function* grid<T>(repeats: number, transports: readonly T[], steps: readonly number[]) {
  for (let r = 0; r < repeats; r++)
    for (const t of transports) for (const rate of steps) yield [r, t, rate] as const;
}

interface StepRow {
  transport: TransportName;
  rate: number;
  cpu_ms_per_call: number | null;
  p50_ms: number;
  p99_ms: number;
  errors: number;
  event_loop_utilization: number;
}

/** Per transport and rate over the repeats: median (min–max) CPU ms per call, median p50/p99, errors. */
function summarize(rows: StepRow[]) {
  const cells = new Map<string, StepRow[]>();
  for (const r of rows) {
    const k = `${r.transport} ${r.rate}`;
    cells.set(k, [...(cells.get(k) ?? []), r]);
  }
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return [...cells.values()].map((cell) => {
    const cpu = cell.map((r) => r.cpu_ms_per_call ?? Number.NaN);
    return {
      transport: cell[0]!.transport,
      rate: cell[0]!.rate,
      runs: cell.length,
      cpu_ms_per_call_median: r3(median(cpu)),
      cpu_ms_per_call_min: r3(Math.min(...cpu)),
      cpu_ms_per_call_max: r3(Math.max(...cpu)),
      p50_ms_median: r3(median(cell.map((r) => r.p50_ms))),
      p99_ms_median: r3(median(cell.map((r) => r.p99_ms))),
      elu_median: r3(median(cell.map((r) => r.event_loop_utilization))),
      errors: cell.reduce((s, r) => s + r.errors, 0),
    };
  });
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      steps: { type: 'string' },
      seconds: { type: 'string' },
      'warmup-seconds': { type: 'string' },
      connections: { type: 'string' },
      transports: { type: 'string' },
      repeats: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const steps = parseList('--steps', values.steps ?? '200,1000,2000');
  const seconds = parseNumber('--seconds', values.seconds ?? '5');
  const warmupS = parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '3', true);
  const connections = parseNumber('--connections', values.connections ?? '4');
  const repeats = parseNumber('--repeats', values.repeats ?? '1');
  const transports = (values.transports ?? TRANSPORT_NAMES.join(',')).split(',') as TransportName[];
  for (const t of transports) {
    if (!TRANSPORT_NAMES.includes(t))
      throw new Error(`--transports: '${t}' is not one of ${TRANSPORT_NAMES.join(', ')}`);
  }
  const out = path.resolve(values.out ?? projectPath('bench/results'));

  const child = fork(new URL(import.meta.url).pathname, ['--serve'], { stdio: 'inherit' });
  const port = await new Promise<number>((resolve) =>
    child.once('message', (m: { port: number }) => resolve(m.port)),
  );
  const addr = `127.0.0.1:${port}`;
  const rows = [];
  try {
    for (const [repeat, transport, rate] of grid(repeats, transports, steps)) {
      const source = syntheticSource({ seed: 1 });
      await runLoad({ addr, rate, durationS: warmupS || 0.5, connections, transport, source });
      const before = readThreads(process.pid);
      const report = await runLoad({ addr, rate, durationS: seconds, connections, transport, source });
      const after = readThreads(process.pid);
      const calls = report.requests.completed;
      const perThread = before && after ? threadCpuStep(before, after, report.duration_s, calls) : null;
      const row = {
        repeat,
        transport,
        rate,
        achieved_rps: report.throughput_rps,
        ok: report.requests.ok,
        errors: report.requests.error_total,
        budget_choice_share: report.packing.budget_choice_share,
        p50_ms: report.latency_ms.p50,
        p99_ms: report.latency_ms.p99,
        send_lag_ms: report.schedule_lag_ms,
        event_loop_utilization: report.driver.event_loop_utilization,
        cpu_ms_per_call: calls > 0 ? Math.round((report.driver.cpu_s * 1e6) / calls) / 1000 : null,
        cpu_ms_per_call_by_thread: perThread?.ms_per_call ?? null,
      };
      rows.push(row);
      console.error(
        `${transport} ${rate} rps: ${row.cpu_ms_per_call} ms CPU/call (main ${perThread?.ms_per_call?.main}, ` +
          `other ${perThread?.ms_per_call?.other}), ELU ${row.event_loop_utilization}, p99 ${row.p99_ms} ms, errors ${row.errors}`,
      );
    }
  } finally {
    child.kill('SIGTERM');
  }
  mkdirSync(out, { recursive: true });
  const file = path.join(out, 'driver.json');
  const result = {
    generated_at: new Date().toISOString(),
    node: process.version,
    machine: machineInfo(),
    config: {
      steps,
      seconds,
      warmup_seconds: warmupS,
      connections,
      transports,
      repeats,
      server: 'canned 15 KB answer, node:http2 child',
    },
    summary: summarize(rows),
    steps: rows,
  };
  writeResultFile(file, result);
  console.table(result.summary);
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
  return 0;
}

if (process.argv[2] === '--serve') serve();
else runBenchMain(() => main(process.argv.slice(2)));
