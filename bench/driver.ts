/**
 * `npm run bench:driver [-- --steps 200,1000,2000] [--seconds 5] [--warmup-seconds 3]`: what the load
 * driver itself costs per call (issue 10 target: ≤ 0.15 ms CPU per call at 1,000 req/s), isolated from the
 * service. A child process serves a canned AssembleContext answer (30 memories_used rows, ~13 KB, as a
 * LoCoMo answer) over plain `node:http2`, so the server side stays cheap and the driver's figures do not
 * depend on whether the real service keeps up; the driver runs in this process, open loop, per transport.
 *
 * Per step: driver CPU per answered call from `/proc/self/task/<tid>/stat` (main thread and the rest:
 * GC/compiler helpers), its event-loop utilization and send lag. Writes bench/results/driver.json.
 */
import { fork } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ASSEMBLE_METHOD } from '../src/client/context-client.js';
import { grpcFrame } from '../src/client/grpc-frames.js';
import { runLoad } from '../src/client/load-driver.js';
import type { TransportName } from '../src/client/load-transport.js';
import { syntheticSource } from '../src/client/request-source.js';
import type { AssembleContextResponse } from '../src/server/proto.js';
import { LEVEL_HEADER } from '../src/wire-headers.js';
import { machineInfo, parseList, parseNumber, runBenchMain } from './lib/bench-run.js';
import { projectPath } from './lib/paths.js';
import { readThreads, threadCpuStep } from './lib/thread-cpu.js';

/** The canned answer: a LoCoMo-sized context and 30 candidate rows, 6 of them excluded for budget. */
function cannedFrame(): Buffer {
  const rows = Array.from({ length: 30 }, (_, i) => ({
    memory_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    composite_score: 0.5,
    relevance_score: 0.5,
    recency_score: 0,
    usefulness_score: 0,
    rank: i + 1,
    category: 'fact',
    exclusion: i < 24 ? 'included' : 'budget',
    similarity: 0.5,
    confidence: 1,
    token_estimate: 110,
  }));
  const res = {
    assembled_context: 'x'.repeat(12_000),
    tokens_used: 3000,
    memories_included: 24,
    memories_used: rows,
    memory_tokens: 2640,
    score_schema: 'interim_v1',
    degradation: { level: 'L0', intentional: false, reasons: [], branches: [] },
  } as unknown as AssembleContextResponse;
  return grpcFrame(ASSEMBLE_METHOD.responseSerialize(res) as Buffer);
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

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      steps: { type: 'string' },
      seconds: { type: 'string' },
      'warmup-seconds': { type: 'string' },
      connections: { type: 'string' },
      transports: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const steps = parseList('--steps', values.steps ?? '200,1000,2000');
  const seconds = parseNumber('--seconds', values.seconds ?? '5');
  const warmupS = parseNumber('--warmup-seconds', values['warmup-seconds'] ?? '3', true);
  const connections = parseNumber('--connections', values.connections ?? '4');
  const transports = (values.transports ?? 'frames,h2,grpc-js').split(',') as TransportName[];
  const out = path.resolve(values.out ?? projectPath('bench/results'));

  const child = fork(new URL(import.meta.url).pathname, ['--serve'], { stdio: 'inherit' });
  const port = await new Promise<number>((resolve) =>
    child.once('message', (m: { port: number }) => resolve(m.port)),
  );
  const addr = `127.0.0.1:${port}`;
  const rows = [];
  try {
    for (const transport of transports) {
      for (const rate of steps) {
        const source = syntheticSource({ seed: 1 });
        await runLoad({ addr, rate, durationS: warmupS || 0.5, connections, transport, source });
        const before = readThreads(process.pid);
        const report = await runLoad({ addr, rate, durationS: seconds, connections, transport, source });
        const after = readThreads(process.pid);
        const calls = report.requests.completed;
        const perThread = before && after ? threadCpuStep(before, after, report.duration_s, calls) : null;
        const row = {
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
      server: 'canned 13 KB answer, node:http2 child',
    },
    steps: rows,
  };
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  console.table(
    rows.map((r) => ({
      transport: r.transport,
      rate: r.rate,
      'ms/call': r.cpu_ms_per_call,
      ELU: r.event_loop_utilization,
      p99: r.p99_ms,
      err: r.errors,
    })),
  );
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
  return 0;
}

if (process.argv[2] === '--serve') serve();
else runBenchMain(() => main(process.argv.slice(2)));
