/**
 * Thread hops per AssembleContext on the embedded store, and what one costs: the round-trip of an empty task
 * to a Piscina pool configured as the CPU-stage pool (one task per thread) and as the store-read threads
 * (two in flight per thread), sequential, after a warm-up. Run pinned to one core to see the hops without a
 * second core hiding the wake-ups:
 *
 *   npm run build && taskset -c 1 node dist/bench/internal/hops.js [--iterations 5000]
 *
 * Writes bench/results/hops.json (µs per round-trip: median, p99). The hop count per call is the design's
 * (docs/design/worker-pool.md, "Thread hops per call"): it is asserted in the output, not measured.
 */
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import { round } from '../../src/tools/client/stats.js';
import { parseInteger } from '../lib/bench-run.js';
import { writeResult } from '../lib/paths.js';

const filename = fileURLToPath(new URL('./lib/echo-worker.js', import.meta.url));

/** Messages crossing threads per AssembleContext on the embedded store (directive and hot from the cache). */
const HOPS_PER_CALL = [
  {
    hop: 'main → store-read thread (cold search batch)',
    isolation: 'SQLite FTS5 and memory text off the event loop',
  },
  { hop: 'store-read thread → main (hits as UTF-8 views)', isolation: 'same round-trip' },
  {
    hop: 'main → CPU-stage thread (candidates, history bytes)',
    isolation: 'knapsack DP and formatting off the event loop',
  },
  { hop: 'CPU-stage thread → main (spliced answer)', isolation: 'same round-trip' },
];

async function roundTrips(pool: Piscina, n: number): Promise<{ p50_us: number; p99_us: number }> {
  for (let i = 0; i < 200; i++) await pool.run(i);
  const us: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    await pool.run(i);
    us.push(Number(process.hrtime.bigint() - t) / 1000);
  }
  us.sort((a, b) => a - b);
  const at = (p: number) => us[Math.min(us.length - 1, Math.floor((p / 100) * us.length))]!;
  return { p50_us: round(at(50), 1), p99_us: round(at(99), 1) };
}

const args = process.argv.slice(2);
const at = args.indexOf('--iterations');
const iterations = at >= 0 ? parseInteger('--iterations', args[at + 1]!) : 5000;

const cpuPool = new Piscina({ filename, minThreads: 1, maxThreads: 1, concurrentTasksPerWorker: 1 });
const storePool = new Piscina({ filename, minThreads: 1, maxThreads: 1, concurrentTasksPerWorker: 2 });
const cpu = await roundTrips(cpuPool, iterations);
const store = await roundTrips(storePool, iterations);
await cpuPool.destroy();
await storePool.destroy();

const result = {
  cpus: os.availableParallelism(),
  iterations,
  hops_per_call: HOPS_PER_CALL.length,
  hops: HOPS_PER_CALL,
  empty_task_round_trip: { cpu_stage_pool: cpu, store_read_pool: store },
  per_call_hop_cost_p50_us: round(cpu.p50_us + store.p50_us, 1),
  loadavg_1m: os.loadavg()[0],
};
writeResult('hops', result);
console.log(JSON.stringify(result, null, 2));
