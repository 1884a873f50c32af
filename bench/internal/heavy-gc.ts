/**
 * `npm run bench:internal -- heavy-gc [-- --calls 30]`: what one heavy request costs the service's event loop in
 * garbage collection. A service child on the embedded store gets `--calls` AssembleContext calls
 * of 100 × 32,768 CJK characters (≈ 9.8 MB, the largest history contract.md §11 allows), one after another over
 * one HTTP/2 connection; between two /metrics scrapes it reports the main isolate's mark-compacts and GC
 * time per call (prom-client's `nodejs_gc_duration_seconds`) and the client's time per call.
 * Writes bench/results/heavy-gc.json. A fresh 10 MB buffer per message is new external memory to V8,
 * which collects every 64 MB of it on the main thread; src/util/message-buffers.ts reuses request buffers.
 */
import { randomUUID } from 'node:crypto';
import { stringFlags } from '../../src/tools/cli/command-args.js';
import { encodeRequestFrame } from '../../src/tools/client/grpc-frames.js';
import { RawChannel, type RawOutcome } from '../../src/tools/client/raw-grpc.js';
import { percentilesOf } from '../../src/tools/client/stats.js';
import { benchOptions, machineInfo, parseNumber, runBenchMain, tempDir } from '../lib/bench-run.js';
import { writeResult } from '../lib/paths.js';
import { snapshot, stepStats } from '../lib/server-metrics.js';
import { startBenchService } from '../lib/service-child.js';

const USAGE = `usage: npm run bench:internal -- heavy-gc [options]
  --calls <n>    9.8 MB calls, one after another (default 30); writes bench/results/heavy-gc.json`;

const round3 = (x: number) => Math.round(x * 1000) / 1000;

async function main(): Promise<number> {
  const opts = benchOptions(process.argv.slice(2), USAGE, stringFlags('calls'), (v) => ({
    calls: v.calls === undefined ? 30 : Math.ceil(parseNumber('calls', v.calls)),
  }));
  if (typeof opts === 'number') return opts;
  const { service } = await startBenchService(tempDir('ibex-heavy-gc-'));
  const channel = new RawChannel({ addr: service.grpcAddr });
  try {
    await channel.ready(service.grpcAddr, 5000);
    const frame = encodeRequestFrame({
      org_id: randomUUID(),
      agent_id: randomUUID(),
      model: 'gpt-4o',
      query: 'sailing',
      recent_messages: Array.from({ length: 100 }, () => ({ role: 'user', content: '漢'.repeat(32_768) })),
    });
    const one = () =>
      new Promise<{ ms: number; outcome: RawOutcome }>((resolve) => {
        const start = performance.now();
        channel.call(
          frame,
          { timeoutMs: 10_000, keepBody: false },
          {
            done: (outcome) => resolve({ ms: performance.now() - start, outcome }),
          },
        );
      });
    for (let i = 0; i < 3; i++) await one();
    const before = await snapshot(service);
    const ms: number[] = [];
    const codes: Record<string, number> = {};
    for (let i = 0; i < opts.calls; i++) {
      const { ms: t, outcome } = await one();
      ms.push(t);
      codes[outcome.code] = (codes[outcome.code] ?? 0) + 1;
    }
    const step = stepStats(before, await snapshot(service));
    const p = percentilesOf(ms);
    const per = (x: number) => Math.round((x / opts.calls) * 1000) / 1000;
    const gcMs = Object.values(step.gc.by_kind).reduce((s, k) => s + k.ms, 0);
    const result = {
      machine: machineInfo(),
      calls: opts.calls,
      request_bytes: frame.length,
      status_codes: codes,
      ms_per_call: { p50: round3(p(50)), p99: round3(p(99)), max: round3(Math.max(...ms)) },
      main_thread_gc: {
        mark_compacts_per_call: per(step.gc.by_kind.major?.count ?? 0),
        gc_ms_per_call: per(gcMs),
        by_kind: step.gc.by_kind,
      },
      event_loop_delay_ms: step.event_loop_delay_ms,
    };
    console.log(
      `${opts.calls} calls of ${frame.length} bytes: status ${JSON.stringify(codes)}, ` +
        `p50 ${result.ms_per_call.p50} ms per call; main-thread mark-compacts per call ` +
        `${result.main_thread_gc.mark_compacts_per_call}, GC ${result.main_thread_gc.gc_ms_per_call} ms per call`,
    );
    writeResult('heavy-gc', result);
    return 0;
  } finally {
    channel.close();
    await service.stop();
  }
}

runBenchMain(main, { exit: true });
