/** `bench:isolation`'s reference floor: how much later a server with no work answers beside busy cores. */
import { spawn } from 'node:child_process';
import os from 'node:os';
import { type LoadReport, runLoad } from '../../src/tools/client/load-driver.js';
import { cyclingSource } from '../../src/tools/client/request-source.js';
import { round } from '../../src/tools/client/stats.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';
import { startBareGrpcServer } from './bare-grpc.js';
import { BENCH_DEADLINE_MS } from './service-child.js';

/**
 * The quiet org's p99 ratio for a server that does no work: the bare gRPC server (bench/lib/bare-grpc.ts)
 * driven with `requests` (the quiet org's) at `rate` calls/s for `seconds`, alone and then beside one busy loop per core (processes at the same
 * priority holding the CPUs, as the attack's load does), started with the service's `nodeFlags`. A
 * reference for the ×2 target: what this machine's scheduling does to a server with no work and no
 * threads. Latencies in ms.
 */
export async function bareServerRatio(
  seconds: number,
  rate: number,
  nodeFlags: readonly string[],
  requests: AssembleContextRequestInput[],
) {
  const { port, child } = await startBareGrpcServer('codec', nodeFlags);
  try {
    const drive = (name: string, durationS: number) =>
      runLoad({
        addr: `127.0.0.1:${port}`,
        rate,
        durationS,
        connections: 2,
        timeoutMs: BENCH_DEADLINE_MS,
        source: cyclingSource(name, requests),
      });
    await drive('bare server warm-up', 2);
    const alone = await drive('bare server alone', seconds);
    // Each loop ends by itself a little after the phase, so none outlives a killed bench for long.
    const untilMs = (seconds + 5) * 1000;
    const loops = Array.from({ length: os.availableParallelism() }, () =>
      spawn(process.execPath, ['-e', `const end = Date.now() + ${untilMs}; while (Date.now() < end) {}`]),
    );
    let beside: LoadReport;
    try {
      beside = await drive('bare server beside busy loops', seconds);
    } finally {
      for (const loop of loops) loop.kill('SIGKILL');
    }
    return {
      busy_loops: loops.length,
      alone_p99_ms: alone.latency_ms.p99,
      beside_busy_loops_p99_ms: beside.latency_ms.p99,
      p99_ratio: round(beside.latency_ms.p99 / Math.max(1e-9, alone.latency_ms.p99), 2),
      errors: alone.requests.error_total + beside.requests.error_total,
    };
  } finally {
    child.kill('SIGTERM');
  }
}
