/**
 * `npm run bench:pool`: what the worker pool costs and what it buys. Figures, not gates.
 *
 * 1. Round-trip overhead of the pool against the same pack + format inline, on a typical assembly (n=30,
 *    ~100-token memories, budget 120000): p50 / p99 µs of each, and the added p99. Samples alternate
 *    inline / pool so that drift in machine load hits both alike; batches are encoded beforehand (the
 *    main thread encodes in both designs).
 * 2. Main-thread event-loop delay (`monitorEventLoopDelay`, 1 ms resolution) while a stream of
 *    pathological tasks (ceiling raised to 10M, n=200 × 6251 cells) is packed and formatted: through the
 *    pool, then the same work inline, in the same run. Encoding stays on the main thread in both.
 * 3. Main-thread CPU per pooled task: what one dispatch and its result cost the event loop (the
 *    pool client and piscina), from `/proc/<pid>/task/<pid>/stat` (Linux only; 10 ms ticks, hence
 *    thousands of tasks per round). Batches are encoded before each round, so encoding is not in it.
 *
 * Writes bench/results/pool.json. BENCH_OVERHEAD_SAMPLES, BENCH_STREAM_MS and BENCH_DISPATCH_TASKS shorten or
 * lengthen it.
 */

import os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep, setImmediate as yieldToLoop } from 'node:timers/promises';
import { encodeCandidates } from '../src/cpu-stage/cpu-batch-encode.js';
import { type CpuCandidate, runCpuTask } from '../src/cpu-stage/cpu-task.js';
import { CpuPool } from '../src/pool/pool-client.js';
import { estimateTokens } from '../src/text/estimate.js';
import { medianOfSorted, percentilesOf } from '../src/tools/client/stats.js';
import { writeResult } from './lib/paths.js';
import { type SyntheticCandidate, syntheticCandidates, toCpuCandidate } from './lib/synthetic.js';
import { readThreads } from './lib/thread-cpu.js';

const epochNow = (): number => performance.timeOrigin + performance.now();

/** Tokens of the nonce-tagged wrapper around one memory block, roughly (open/close tags, newlines). */
const WRAPPER_TOKENS = 30;

function toCpu(candidates: readonly SyntheticCandidate[]): CpuCandidate[] {
  return candidates.map((c) => toCpuCandidate(c, estimateTokens(c.content, 'chars_div_4') + WRAPPER_TOKENS));
}

function encode(
  candidates: readonly CpuCandidate[],
  budget: number,
  dpCellCeiling: number,
  deadlineMs: number,
) {
  return encodeCandidates(candidates, {
    budget,
    dpCellCeiling,
    maxConsecutiveSkips: 5,
    nonce: 'bench-nonce-0123456789',
    directive: 'You are a helpful assistant. Keep answers short.',
    recentMessages: [
      { role: 'user', content: 'What did we decide about the deploy window?' },
      { role: 'assistant', content: 'Let me check the notes.' },
    ],
    toolSchemas: [],
    deadline: epochNow() + deadlineMs,
  });
}

const percentile = (samples: readonly number[], p: number) => percentilesOf(samples)(p);

const round1 = (x: number) => Math.round(x * 10) / 10;
const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** Samples per block: blocks of inline and pool calls alternate, so drift in machine load hits both. */
const BLOCK = 100;

async function overhead(pool: CpuPool, samples: number) {
  // ~100-token memories: 360–440 characters under chars_div_4.
  const candidates = toCpu(syntheticCandidates(0x9001, 30, 360, 440));
  const budget = 120_000;
  const make = () => encode(candidates, budget, 437_570, 10_000);
  const probe = runCpuTask(make());
  const inline: number[] = [];
  const viaPool: number[] = [];
  const minusRun: number[] = [];
  const warmup = Math.min(5 * BLOCK, samples);
  for (let done = -warmup; done < samples; done += BLOCK) {
    const record = done >= 0;
    for (let i = 0; i < BLOCK; i++) {
      const input = make();
      const t0 = performance.now();
      runCpuTask(input);
      if (record) inline.push((performance.now() - t0) * 1000);
    }
    // Back to back, as under steady load: the thread is awake when the next task arrives.
    for (let i = 0; i < BLOCK; i++) {
      const input = make();
      const t0 = performance.now();
      const r = await pool.run(input);
      if (!record) continue;
      viaPool.push((performance.now() - t0) * 1000);
      minusRun.push(r.round_trip_us - r.run_us);
    }
  }
  // After an idle gap, as under light load: both threads were asleep, so the round-trip pays two wake-ups.
  const cold: number[] = [];
  for (let i = 0; i < Math.min(600, samples); i++) {
    await sleep(2);
    const input = make();
    const t0 = performance.now();
    await pool.run(input);
    cold.push((performance.now() - t0) * 1000);
  }
  return {
    inline_p50_us: round1(percentile(inline, 50)),
    inline_p99_us: round1(percentile(inline, 99)),
    pool_p50_us: round1(percentile(viaPool, 50)),
    pool_p99_us: round1(percentile(viaPool, 99)),
    added_p50_us: round1(percentile(viaPool, 50) - percentile(inline, 50)),
    added_p99_us: round1(percentile(viaPool, 99) - percentile(inline, 99)),
    round_trip_minus_run_p50_us: round1(percentile(minusRun, 50)),
    round_trip_minus_run_p99_us: round1(percentile(minusRun, 99)),
    cold_pool_p50_us: round1(percentile(cold, 50)),
    cold_pool_p99_us: round1(percentile(cold, 99)),
    samples,
    cold_samples: cold.length,
    shape: {
      n: 30,
      budget,
      token_sum: candidates.reduce((s, c) => s + c.tokens, 0),
      path: probe.pack.path,
      memories_included: probe.memories_included,
      context_chars: probe.assembled_context.length,
    },
  };
}

interface StreamResult {
  p99_ms: number;
  max_ms: number;
  tasks: number;
  task_run_p50_ms: number;
}

/** Runs `work` for `ms` while the loop-delay histogram records; returns p99/max in ms. */
async function measureLoop(ms: number, work: (until: number) => Promise<{ tasks: number; runMs: number[] }>) {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  const { tasks, runMs } = await work(performance.now() + ms);
  h.disable();
  return {
    p99_ms: round3(h.percentile(99) / 1e6),
    max_ms: round3(h.max / 1e6),
    tasks,
    task_run_p50_ms: round3(percentile(runMs, 50)),
  } satisfies StreamResult;
}

async function loopDelay(pool: CpuPool, threads: number, ms: number) {
  // The pack bench's case e shape, with the ceiling raised so the 200 × 6251 table runs as DP.
  const candidates = toCpu(syntheticCandidates(0x1bec + 200, 200, 40, 4000));
  const budget = 100_000;
  const ceiling = 10_000_000;
  const probe = runCpuTask(encode(candidates, budget, ceiling, 60_000));

  // The floor: the histogram records whole timer intervals (≥ its 1 ms resolution) and sees the OS
  // scheduling of this machine, so an idle loop is the baseline the two runs compare against.
  const idle = await measureLoop(Math.min(ms, 2000), async (until) => {
    await sleep(until - performance.now());
    return { tasks: 0, runMs: [] };
  });

  const encodeMs: number[] = [];
  const poolRun = await measureLoop(ms, async (until) => {
    const runMs: number[] = [];
    let tasks = 0;
    // One task per thread in flight, plus one waiting, so no thread idles between tasks.
    const lane = async () => {
      while (performance.now() < until) {
        const t0 = performance.now();
        const input = encode(candidates, budget, ceiling, 60_000);
        encodeMs.push(performance.now() - t0);
        const r = await pool.run(input);
        runMs.push(r.run_us / 1000);
        tasks++;
      }
    };
    await Promise.all(Array.from({ length: threads + 1 }, lane));
    return { tasks, runMs };
  });

  const inlineRun = await measureLoop(ms, async (until) => {
    const runMs: number[] = [];
    let tasks = 0;
    while (performance.now() < until) {
      const out = runCpuTask(encode(candidates, budget, ceiling, 60_000));
      runMs.push(out.run_us / 1000);
      tasks++;
      // Let timers and I/O in between tasks, as a server would between requests.
      await yieldToLoop();
    }
    return { tasks, runMs };
  });

  return {
    pool_p99_ms: poolRun.p99_ms,
    pool_max_ms: poolRun.max_ms,
    inline_p99_ms: inlineRun.p99_ms,
    inline_max_ms: inlineRun.max_ms,
    idle_p99_ms: idle.p99_ms,
    idle_max_ms: idle.max_ms,
    pool_tasks: poolRun.tasks,
    inline_tasks: inlineRun.tasks,
    pool_task_run_p50_ms: poolRun.task_run_p50_ms,
    inline_task_run_p50_ms: inlineRun.task_run_p50_ms,
    main_thread_encode_p50_ms: round3(percentile(encodeMs, 50)),
    duration_ms_each: ms,
    shape: {
      n: 200,
      budget,
      dp_cell_ceiling: ceiling,
      cells: probe.pack.cells,
      path: probe.pack.path,
      memories_included: probe.memories_included,
      context_chars: probe.assembled_context.length,
    },
  };
}

/** CPU seconds of this process's main thread so far; null without `/proc`. */
function mainThreadCpuS(): number | null {
  return readThreads(process.pid)?.get(process.pid)?.cpu_s ?? null;
}

/** Rounds of section 3; their median is the figure, the spread tells the noise. */
const DISPATCH_ROUNDS = 5;

/** Section 3 (module comment): main-thread CPU µs per task, one task in flight, typical n=30 batches. */
async function dispatchCpu(pool: CpuPool, tasks: number) {
  if (mainThreadCpuS() === null) return null;
  const candidates = toCpu(syntheticCandidates(0x9002, 30, 360, 440));
  const perTaskUs: number[] = [];
  for (let round = 0; round < DISPATCH_ROUNDS; round++) {
    const inputs = Array.from({ length: tasks }, () => encode(candidates, 120_000, 437_570, 600_000));
    const cpu0 = mainThreadCpuS()!;
    for (const input of inputs) await pool.run(input);
    perTaskUs.push(((mainThreadCpuS()! - cpu0) * 1e6) / tasks);
  }
  return {
    main_cpu_per_task_us_median: round1(medianOfSorted([...perTaskUs].sort((a, b) => a - b))),
    main_cpu_per_task_us_rounds: perTaskUs.map(round1),
    tasks_per_round: tasks,
  };
}

async function main() {
  const samples = Number(process.env.BENCH_OVERHEAD_SAMPLES ?? 3000);
  const streamMs = Number(process.env.BENCH_STREAM_MS ?? 5000);
  const dispatchTasks = Number(process.env.BENCH_DISPATCH_TASKS ?? 5000);
  const cpus = os.availableParallelism();
  // Leave the main thread a core of its own: that is the point of the pool.
  const threads = Math.max(1, cpus - 1);
  const pool = await CpuPool.start({
    minThreads: threads,
    maxThreads: threads,
    maxQueue: 64,
    idleTimeoutMs: 60_000,
    maxOldGenerationMb: 256,
  });
  let result: Record<string, unknown>;
  try {
    const over = await overhead(pool, samples);
    const loop = await loopDelay(pool, threads, streamMs);
    const dispatch = await dispatchCpu(pool, dispatchTasks);
    result = {
      generated_at: new Date().toISOString(),
      node: process.version,
      cpus,
      pool_threads: threads,
      load_average_1m: round3(os.loadavg()[0]!),
      overhead: over,
      loop_delay: loop,
      dispatch_cpu: dispatch,
      pool_stats: pool.stats(),
    };
  } finally {
    await pool.close();
  }
  writeResult('pool', result);
  const o = result.overhead as Awaited<ReturnType<typeof overhead>>;
  const l = result.loop_delay as Awaited<ReturnType<typeof loopDelay>>;
  console.log(`pool: ${threads} thread(s) on ${cpus} CPU(s), node ${process.version}`);
  console.log(
    `(1) typical assembly (n=30, ~100-token memories, budget 120000), ${o.samples} samples each, µs:`,
  );
  console.table({
    inline: { p50: o.inline_p50_us, p99: o.inline_p99_us },
    pool: { p50: o.pool_p50_us, p99: o.pool_p99_us },
    added: { p50: o.added_p50_us, p99: o.added_p99_us },
    'round-trip − worker run': { p50: o.round_trip_minus_run_p50_us, p99: o.round_trip_minus_run_p99_us },
    'pool after a 2 ms idle gap': { p50: o.cold_pool_p50_us, p99: o.cold_pool_p99_us },
  });
  console.log(
    `(2) event-loop delay, stream of n=200 × ${l.shape.cells / 200}-cell tasks (path ${l.shape.path}), ${streamMs} ms each, ms:`,
  );
  console.table({
    pool: {
      p99: l.pool_p99_ms,
      max: l.pool_max_ms,
      tasks: l.pool_tasks,
      task_run_p50: l.pool_task_run_p50_ms,
    },
    inline: {
      p99: l.inline_p99_ms,
      max: l.inline_max_ms,
      tasks: l.inline_tasks,
      task_run_p50: l.inline_task_run_p50_ms,
    },
    'idle (baseline)': { p99: l.idle_p99_ms, max: l.idle_max_ms, tasks: 0, task_run_p50: 0 },
  });
  console.log(`main-thread encoding of one n=200 batch (pool run): p50 ${l.main_thread_encode_p50_ms} ms`);
  const d = result.dispatch_cpu as Awaited<ReturnType<typeof dispatchCpu>>;
  console.log(
    d === null
      ? '(3) main-thread CPU per pooled task: needs /proc (Linux)'
      : `(3) main-thread CPU per pooled task (dispatch + result, n=30, one in flight): median ${d.main_cpu_per_task_us_median} µs over ${DISPATCH_ROUNDS} rounds of ${d.tasks_per_round} (${d.main_cpu_per_task_us_rounds.join(' / ')})`,
  );
  console.log(`1-min load average during the run: ${result.load_average_1m}`);
  console.log('wrote bench/results/pool.json');
}

await main();
